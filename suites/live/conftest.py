"""Live-layer fixtures shared by its tests: the server's context limit and a token budget
measured with the server's tokenizer, the tie-aware generation snapshot, and the passkey
mode in force."""

from pathlib import Path

import pytest

from kdgate.generation_snapshot import GenerationSnapshotExtension
from kdgate.live_prompts import TokenBudget

UNREPORTED_LIMIT_FALLBACK = 4096


@pytest.fixture(scope="session")
def context_limit(live_client, gate_notes) -> int:
    limit = live_client.context_limit()
    if limit is None:
        gate_notes.append(f"live: the server does not report its context limit; using {UNREPORTED_LIMIT_FALLBACK}")
        return UNREPORTED_LIMIT_FALLBACK
    return int(limit)


@pytest.fixture(scope="session")
def token_budget(live_client) -> TokenBudget:
    return TokenBudget(live_client.count_tokens)


@pytest.fixture
def generation_snapshot(snapshot, tie_eps, pytestconfig):
    GenerationSnapshotExtension.eps = tie_eps
    GenerationSnapshotExtension.snapshot_dir = Path(pytestconfig.getoption("--snapshot-dir"))
    GenerationSnapshotExtension.updating = bool(pytestconfig.getoption("--snapshot-update"))
    return snapshot.use_extension(GenerationSnapshotExtension)


@pytest.fixture(scope="session")
def passkey_mode(pytestconfig, live_client) -> str:
    mode = pytestconfig.getoption("--passkey-mode")
    if mode == "auto":
        mode = "absolute" if live_client.flavor() == "sglang" else "relative"
    return mode
