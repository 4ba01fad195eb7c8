"""The live demo behind ``streamdp demo``: paced synthetic producers, the worker process, and
the terminal board that shows releases as they land.

- :mod:`streamdp.demo.feed`: synthetic events keyed by source, paced by simulated event time;
- :mod:`streamdp.demo.board`: the view of the output topics (pure: records in, text lines out);
- :mod:`streamdp.demo.board_view`: that view drawn as a terminal board sized to the terminal;
- :mod:`streamdp.demo.live`: the live loop (producers, output consumer, polling, drawing);
- :mod:`streamdp.demo.session`: broker, worker and the live loop in one process, stopped in order;
- :mod:`streamdp.demo.worker`: one ``streamdp worker`` subprocess, started and stopped cleanly.
"""
