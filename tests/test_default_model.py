"""The embedded default model: deterministic by seed, safe under concurrent first builds."""
import hashlib, os, subprocess, sys
from pathlib import Path
import pytest

from tunix_agentic.models.default import default_model_dir, load_default

FILES = ('config.json', 'model.safetensors', 'tokenizer.json', 'generation_config.json')


def _digest(d: Path) -> dict:
    return {f: hashlib.sha256((d / f).read_bytes()).hexdigest() for f in FILES}


@pytest.mark.timeout(180)
def test_deterministic_and_concurrent(tmp_path, monkeypatch):
    # two processes race to build into one empty cache; all must see the same complete dir
    env = {**os.environ, 'TUNIX_AGENTIC_CACHE': str(tmp_path / 'a'), 'JAX_PLATFORMS': 'cpu'}
    code = 'from tunix_agentic.models.default import default_model_dir; print(default_model_dir(0))'
    procs = [subprocess.Popen([sys.executable, '-c', code], env=env, stdout=subprocess.PIPE,
                              text=True) for _ in range(2)]
    outs = {p.communicate(timeout=150)[0].strip() for p in procs}
    assert all(p.returncode == 0 for p in procs) and len(outs) == 1
    built = Path(outs.pop())
    assert not [p for p in built.parent.iterdir() if p.name.startswith('.build-')]
    # a second cache folder built from scratch holds byte-identical files
    monkeypatch.setenv('TUNIX_AGENTIC_CACHE', str(tmp_path / 'b'))
    again = default_model_dir(0)
    assert again != built and _digest(again) == _digest(built)
    assert _digest(default_model_dir(1))['model.safetensors'] != _digest(again)['model.safetensors']
    model, cfg, tok = load_default(0)
    assert cfg.vocab_size == len(tok) and cfg.head_dim == 128
