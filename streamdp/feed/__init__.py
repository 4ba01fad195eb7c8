"""The public statistics feed: the page a statistics office publishes from the release topics.

``streamdp feed`` reads ONLY public records (README, "Privacy model", trust zones): the release
and consistent topics (``<ns>.releases``, ``<ns>.consistent``) or a replay's ``releases.jsonl``
and ``consistent.jsonl``. Never dead letters, the snapshot, the ledger or the input topics.

Modules: :mod:`.records` and :mod:`.record_fields` (pure: the public record fields, parsed),
:mod:`.model` (pure: records in, the published view out), :mod:`.tables` (its CSV),
:mod:`.privacy_loss` (pure: per stream and per source, what one event or unit can lose),
:mod:`.sources` (replay directory and Kafka readers), :mod:`.page` (the self-contained HTML
page) and :mod:`.page_script` (its script), :mod:`.server` (loopback HTTP server and the
static writer), :mod:`.console` (what the operator is told: records not shown, by reason),
:mod:`.cli` (the command).
"""
