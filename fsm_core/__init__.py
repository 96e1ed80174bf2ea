"""fsm_core: executable specification of turn cancellation and teardown."""
