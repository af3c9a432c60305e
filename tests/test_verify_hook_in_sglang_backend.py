"""KDTREE_VERIFY installs into SGLang's real TritonAttnBackend through load_plugins().

Each case builds the real backend class in a fresh process (``kdgate.backend_probe``: SGLang's
own MLA attention test kit, CPU, TARGET_VERIFY) and reads back its verify slot. The import
chain of the attention backend needs SGLang's pinned torch 2.14.1 with torchvision and
transformers, which the ``backend`` tox env installs; elsewhere these tests are not run
(``KDGATE_REQUIRE_BACKEND=1``, set by that env, turns not-run into a failure)."""

import json
import os
import subprocess
import sys

import pytest

SLOT = "kdtree.verify_override.VerifySlot"


def probe(tmp_path, *flags: str, **env: str) -> tuple[dict, str]:
    environment = {k: v for k, v in os.environ.items()
                   if not k.startswith("KDTREE_") and k != "SGLANG_PLUGINS"}
    environment.update(env, KDTREE_STATUS_DIR=str(tmp_path))
    done = subprocess.run([sys.executable, "-m", "kdgate.backend_probe", *flags], env=environment,
                          capture_output=True, text=True, timeout=300)
    if done.returncode != 0:
        raise AssertionError(f"backend probe failed (exit {done.returncode}):\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1]), done.stderr


@pytest.fixture(scope="module")
def backend_importable():
    done = subprocess.run([sys.executable, "-c", "import sglang.srt.layers.attention.triton_backend"],
                          capture_output=True, text=True, timeout=300)
    if done.returncode != 0:
        reason = (done.stderr.strip().splitlines() or ["unknown error"])[-1]
        message = (f"not run: SGLang's attention backend does not import in this environment "
                   f"({reason}); run `tox -e backend`")
        if os.environ.get("KDGATE_REQUIRE_BACKEND") == "1":
            pytest.fail(message)
        pytest.skip(message)


@pytest.mark.parametrize("mode", ["on", "validate"])
def test_the_slot_is_installed_on_mla_target_backends(backend_importable, tmp_path, mode):
    info, stderr = probe(tmp_path, KDTREE_VERIFY=mode)
    assert info["backend"] == "sglang.srt.layers.attention.triton_backend.TritonAttnBackend"
    assert info["init_wrapped"] and info["use_mla"] and not info["is_draft_runner"]
    assert info["slot"] == SLOT and info["slot_mode"] == mode
    assert info["use_verify_shared_kv"], "forward_extend only calls the slot when this is set"
    assert info["slot_falls_back_to"] is None, "on NVIDIA SGLang leaves its shared-KV verify off"
    records = [line for line in stderr.splitlines() if line.startswith("[kdtree] event=")]
    assert len(records) == 1, records
    assert ("event=effective hook=verify-override" in records[0]
            and f"mode={mode} on TritonAttnBackend" in records[0]), records[0]
    assert "build=none" not in records[0]


@pytest.mark.parametrize("flag", ["--draft", "--mha"])
def test_draft_and_non_mla_backends_are_left_alone(backend_importable, tmp_path, flag):
    info, stderr = probe(tmp_path, flag, KDTREE_VERIFY="on")
    assert info["init_wrapped"], "the hook is registered on the class"
    assert info["slot"] != SLOT and not info["use_verify_shared_kv"]
    assert "hook=verify-override" not in stderr


@pytest.mark.parametrize("env", [{"KDTREE_VERIFY": "off"},
                                 {"KDTREE_VERIFY": "on", "SGLANG_PLUGINS": "some-other-plugin"}],
                         ids=["verify-off", "plugin-excluded"])
def test_without_the_override_sglangs_own_slot_stays(backend_importable, tmp_path, env):
    """Negative controls: the checks above fail when the override is not in place."""
    info, stderr = probe(tmp_path, **env)
    assert not info["init_wrapped"] and info["slot"] != SLOT and not info["use_verify_shared_kv"]
    assert "hook=verify-override" not in stderr
