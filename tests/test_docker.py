"""docker/ is checked statically: no Docker engine runs here or in CI."""
import configparser, os, re, subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCKER = ROOT / 'docker'


@pytest.mark.parametrize('script', ['run.sh', 'entrypoint.sh'])
def test_scripts_parse(script):
    r = subprocess.run(['bash', '-n', str(DOCKER / script)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


def test_dockerfile_uses_colab_runtime_image():
    text = (DOCKER / 'Dockerfile').read_text()
    assert re.search(r'^FROM us-docker\.pkg\.dev/colab-images/public/runtime', text, re.M)


def _extras():
    cfg = configparser.ConfigParser(delimiters=['='])
    cfg.read(ROOT / 'settings.ini')
    return {k[:-len('_requirements')] for k in cfg['DEFAULT'] if k.endswith('_requirements') and k != 'dev_requirements'} | {'dev'}


def test_install_line_names_existing_extras():
    "The editable install the container runs names only extras that settings.ini defines, including tpu."
    text = (DOCKER / 'entrypoint.sh').read_text()
    m = re.search(r'pip install[^\n]*-e "\$PROJECT_DIR\[([^\]]+)\]"', text)
    assert m, 'entrypoint.sh has no editable install of the mounted checkout'
    extras = set(m.group(1).split(','))
    assert 'tpu' in extras
    assert extras <= _extras(), f'unknown extras {extras - _extras()} (settings.ini has {_extras()})'


def test_run_script_flags():
    text = (DOCKER / 'run.sh').read_text()
    for flag in ['--privileged', '--net=host', '-v /dev:/dev', '-v /run:/run', '-v /var/lib/cloud:/var/lib/cloud',
                 '-e TPU_NAME=local', '/workspace/tunix_agentic', '-w /workspace', '--name']:
        assert flag in text, flag


def test_run_script_rejects_non_checkout(tmp_path):
    "With PROJECT pointing at a non-checkout, run.sh stops with a clear message before calling docker."
    r = subprocess.run(['bash', str(DOCKER / 'run.sh')], capture_output=True, text=True,
                       env={**os.environ, 'PROJECT': str(tmp_path)})
    assert r.returncode == 2
    assert 'is not a tunix_agentic checkout' in r.stderr
