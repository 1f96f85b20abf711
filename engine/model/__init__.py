"""The slowdown model and policy advisor: a memory model and a per-layer time model fitted
from the tidy tables, a virtual-clock simulator that replays a policy's real task graph
with the dispatcher's own rules, leave-pipelines-out cross-validation, and
``python -m engine advise``.

It reads tables and network descriptions only; it never imports the runner.

- ``memory``: what a network instance holds at every step (weights, live activations,
  operator scratch), replayed from its deploy graph, and an LRU model of a memory limit
  that swaps the least recently used bytes out.
- ``simulate``: the task graph in virtual time (``engine.schedule.dispatch.Scheduler``),
  workers sharing the child's CPUs.
- ``fit``: the versioned model file and its fit (SyNERGY-style least squares per layer
  type, LOAD time against bytes, a per-page swap cost).
- ``predict``: one pipeline under one policy and limit -> makespan, peak RAM and swap.
- ``evaluate``: leave-pipelines-out cross-validation per execution mode.
- ``advise``: rank the policies for a pipeline and limit; the smallest limit without swap.
"""
