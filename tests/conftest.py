"""Shared pytest setup: markers that mirror the notebook flags, CPU JAX by default, gpu tests skipped
where no accelerator is present, and the independent mask oracle of the golden-mask tests."""
import os

os.environ.setdefault('JAX_PLATFORMS', 'cpu')
os.environ.setdefault('TOKENIZERS_PARALLELISM', 'false')

import pytest


def pytest_configure(config):
    config.addinivalue_line('markers', 'slow: takes more than ~20 s (mirrors the #| slow notebook flag)')
    config.addinivalue_line('markers', 'gpu: needs an accelerator (mirrors the #| gpu notebook flag)')


def pytest_collection_modifyitems(config, items):
    if os.environ.get('JAX_PLATFORMS', 'cpu') != 'cpu': return
    skip = pytest.mark.skip(reason='needs an accelerator; JAX_PLATFORMS=cpu here')
    for item in items:
        if 'gpu' in item.keywords: item.add_marker(skip)


def _oracle_mask(ids: list[int], prompt_len: int, header: list[int], end_id: int) -> list[int]:
    """A response mask from the token structure alone: 1 after each assistant `header` past the
    prompt, through the next `end_id` (the end-of-turn token) included; 0 everywhere else."""
    mask, i = [0] * len(ids), 0
    while i < len(ids):
        if ids[i:i + len(header)] == header and i + len(header) >= prompt_len:
            j = i + len(header)
            while j < len(ids) and ids[j] != end_id: mask[j] = 1; j += 1
            if j < len(ids): mask[j] = 1
            i = j + 1
        else:
            i += 1
    return mask


@pytest.fixture
def oracle_mask():
    "The independent mask oracle the golden-mask tests compare the encoder's mask with."
    return _oracle_mask
