"""The seeded fault simulation of a raftcore quorum (``python -m raftcore.sim``)."""

from raftcore.sim.cluster import Scenario, SimResult, Simulation
from raftcore.sim.invariants import Invariants, Violation

__all__ = ["Invariants", "Scenario", "SimResult", "Simulation", "Violation"]
