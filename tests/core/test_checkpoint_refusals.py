"""A checkpoint torch's weights-only reader refuses (issue 44.12): the line says why and to convert the weights to
safetensors, never torch's advice to load the file again with ``weights_only=False`` (which runs what it holds).
Each kind of pickle is refused by :func:`medbench_core.retrieval.checkpoints.load_state_dict` without running it,
and torch's own message, however a library relays it, is rewritten before a command prints it."""

import os
import pickle
from pathlib import Path

import pytest

from medbench_core.errors import DataError
from medbench_core.retrieval.checkpoints import NEVER_PICKLES, load_state_dict, without_torch_advice

ADVICE = ("weights_only=False", "`weights_only` set to `False`", "Re-running", "trusted source", "Weights only load failed")


class Payload:
    """Writes a marker file when unpickled: proof that a loader ran the pickle's code."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (Path.write_text, (self.marker, "code ran"))


def writers(marker: Path):
    import torch

    state = {"w": torch.zeros(2)}
    yield "torch.save zip", lambda p: torch.save({**state, "x": Payload(marker)}, p)
    yield "torch.save legacy", lambda p: torch.save({**state, "x": Payload(marker)}, p, _use_new_zipfile_serialization=False)
    for protocol in (0, 2, 4, 5):
        yield f"pickle protocol {protocol}", lambda p, protocol=protocol: p.write_bytes(pickle.dumps({"w": [0.0], "x": Payload(marker)}, protocol=protocol))
    yield "os.system pickle", lambda p: p.write_bytes(pickle.dumps({"w": [0.0], "x": _System()}))


class _System:
    def __reduce__(self):
        return (os.system, ("true",))


@pytest.mark.parametrize("suffix", [".pt", ".bin"])
def test_every_pickle_is_refused_with_what_to_do_and_without_torchs_advice(tmp_path, suffix):
    marker = tmp_path / "marker"
    pickle.loads(pickle.dumps(Payload(tmp_path / "probe")))  # the payload is live: a plain unpickler runs it
    assert (tmp_path / "probe").read_text() == "code ran"
    for what, write in writers(marker):
        path = tmp_path / f"{what.replace(' ', '_')}{suffix}"
        write(path)
        with pytest.raises(DataError) as refused:
            load_state_dict(path, "clip-x")
        said = str(refused.value)
        assert said.startswith(f"model clip-x: refused {path}: it does not load with torch.load(weights_only=True) ("), (what, said)
        assert said.endswith(NEVER_PICKLES) and "convert trusted weights to .safetensors" in said, (what, said)
        assert not [a for a in ADVICE if a in said], (what, said)
        assert not marker.exists(), what


def test_torchs_message_relayed_by_a_library_is_rewritten(tmp_path):
    import torch

    (tmp_path / "plain.bin").write_bytes(pickle.dumps({"w": 1}, protocol=4))  # PROTO 4, then FRAME (opcode 0x95 = 149), which torch does not read
    with pytest.raises(pickle.UnpicklingError) as torch_said:
        torch.load(tmp_path / "plain.bin", weights_only=True)
    assert "weights_only` set to `False` will likely succeed" in str(torch_said.value)  # what torch advises, as of torch 2.x
    relayed = f"task_embeddings: OSError: Unable to load weights from pytorch checkpoint file for {tmp_path}/plain.bin: {torch_said.value} (more)"
    said = without_torch_advice(relayed)
    assert not [a for a in ADVICE if a in said], said
    assert said == (
        f"task_embeddings: OSError: Unable to load weights from pytorch checkpoint file for {tmp_path}/plain.bin: refused: it is a plain pickle, not a "
        f"torch.save file: torch's weights-only reader stops at its instruction 149; {NEVER_PICKLES} (more)"
    )


def test_a_commands_last_line_never_relays_it(tmp_path):
    """The net under every path (a model library that called torch.load itself): the line a command prints."""
    import torch

    from medbench_cli.failures import line

    class Evil:
        def __reduce__(self):
            return (os.system, ("true",))

    torch.save({"x": Evil()}, tmp_path / "evil.pt")
    with pytest.raises(pickle.UnpicklingError) as torch_said:
        torch.load(tmp_path / "evil.pt", weights_only=True)
    said = line("run", f"FAILED: dense-x x scifact: corpus_embeddings: UnpicklingError: {torch_said.value}")
    assert not [a for a in ADVICE if a in said], said
    assert "its pickle names posix.system, which is neither a tensor nor a UniIR config class; medbench never loads pickles" in said
