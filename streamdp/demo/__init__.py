"""The live demo behind ``streamdp demo``: paced synthetic producers, the worker process, and
the terminal board that shows releases as they land.

- :mod:`streamdp.demo.feed`: synthetic events keyed by source, paced by simulated event time;
- :mod:`streamdp.demo.board`: the view of the output topics (pure: records in, text lines out);
- :mod:`streamdp.demo.worker`: one ``streamdp worker`` subprocess, started and stopped cleanly.
"""
