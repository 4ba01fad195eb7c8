"""streamdp: differentially private continual release of statistics from live event streams.

The pure maths (``streamdp.continual``, ``streamdp.consistency``, ``streamdp.noise``) is kept
apart from the adapters (engine, Faust worker, CLI, metrics); the papers' reproductions and the
reference solvers are in ``streamdp.papers``, off every production path. See ``DESIGN.md`` in
the shared design folder and the README.
"""

__version__ = "0.1.0"
