"""Accuracy planner: the error a continual counter will have, before any budget is spent.

- :mod:`streamdp.planner.accuracy`: :func:`~streamdp.planner.accuracy.plan` (variances and 95%
  bounds of one configuration) and :func:`~streamdp.planner.accuracy.compare` (every mechanism);
- :mod:`streamdp.planner.error_bound`: the exact 95% bound of a sum of node noises;
- :mod:`streamdp.planner.target`: the epsilon needed for a target standard deviation;
- :mod:`streamdp.planner.report`: tables for people;
- :mod:`streamdp.planner.spec_plan`: every stream of a spec (``plan --config``);
- :mod:`streamdp.planner.flags`: the ``streamdp plan`` command's flags;
- :mod:`streamdp.planner.cli`: the ``streamdp plan`` command.
"""
