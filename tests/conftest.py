"""Shared pytest setup: markers that mirror the notebook flags, CPU JAX by default, gpu tests skipped
where no accelerator is present."""
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
