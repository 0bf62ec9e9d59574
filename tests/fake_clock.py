"""A wall clock and a monotonic one for tests of what a clock step does
(``eos_runtime.clock.Clock``): time passes on both, a step moves the wall clock alone."""

from __future__ import annotations


class FakeClock:
    def __init__(self, wall: float) -> None:
        self.w = wall
        self.m = 1000.0

    def wall(self) -> float:
        return self.w

    def monotonic(self) -> float:
        return self.m

    def at(self, wall: float) -> FakeClock:
        """Time passes until the wall clock reads ``wall``."""
        assert wall >= self.w
        self.m += wall - self.w
        self.w = wall
        return self

    def advance(self, seconds: float) -> FakeClock:
        return self.at(self.w + seconds)

    def step(self, seconds: float) -> None:
        self.w += seconds
