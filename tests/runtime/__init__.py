"""Tests of the asyncio reference runtime (fsm_core.runtime)."""
