"""bench/device_check.sh --dry: every part of the accelerator check (environment, the demo, a Gemma 3
GRPO stretch, decode at batch 64) runs at toy sizes on the CPU and reports its figures."""
import json, os, subprocess, sys
from pathlib import Path
import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / 'bench'))


def test_model_flops_per_token_by_hand():
    from device_check import model_flops_per_token, peak_flops
    from tunix_agentic.models.gemma3 import Gemma3Config
    cfg = Gemma3Config.tiny(vocab_size=100, num_layers=1, hidden_size=8, intermediate_size=16,
                            num_heads=2, num_kv_heads=1, head_dim=4, layer_types=('full_attention',))
    attn, mlp, unembed = 8 * 4 * (2 * 2 + 2 * 1), 3 * 8 * 16, 8 * 100
    assert model_flops_per_token(cfg, 10) == 6 * (attn + mlp + unembed) + 6 * 2 * 4 * 10
    class Dev: device_kind, platform = 'NVIDIA H100 80GB HBM3', 'gpu'
    assert peak_flops(Dev())[0] == 989e12


@pytest.mark.slow
@pytest.mark.timeout(1500)
def test_dry_run(tmp_path):
    env = {**os.environ, 'JAX_PLATFORMS': 'cpu'}
    r = subprocess.run(['bash', str(ROOT / 'bench/device_check.sh'), '--dry', '--out', str(tmp_path)],
                       capture_output=True, text=True, env=env, cwd=ROOT, timeout=1500)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    assert 'RESULT all parts ran' in r.stdout
    res = json.loads((tmp_path / 'device_check.json').read_text())
    assert res['env']['platform'] == 'cpu'
    assert 'skipped' in res['demo'] or 0 <= res['demo']['after'] <= 1
    assert res['gemma_grpo']['tokens_per_s'] > 0 and res['gemma_grpo']['mfu'] is None  # no CPU peak
    assert res['decode']['batch'] == 64 and res['decode']['generated'] > 0
