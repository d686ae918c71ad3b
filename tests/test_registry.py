"""Every registry fails the same way: the unknown name and the known ones (issue 10)."""
import pytest

from tunix_agentic.envs.environments import env_from_dict, resolve_tools
from tunix_agentic.learn.losses import aggregate, get_advantage_fn
from tunix_agentic.chat.parsers import get_tool_parser
from tunix_agentic.core.registry import UnknownName
from tunix_agentic.envs.rewards import get_reward_fn
from tunix_agentic.learn.trainer import LOSS_FNS


@pytest.mark.parametrize('what,lookup', [
    ('tool parser', lambda: get_tool_parser('nope')),
    ('env', lambda: env_from_dict({'env': 'nope'})),
    ('toolset', lambda: resolve_tools('nope')),
    ('reward', lambda: get_reward_fn('nope')),
    ('advantage estimator', lambda: get_advantage_fn('nope')),
    ('aggregation', lambda: aggregate(None, None, 'nope')),
    ('loss function', lambda: LOSS_FNS['nope']),
])
def test_unknown_names_fail_alike(what, lookup):
    with pytest.raises(UnknownName, match=rf"^unknown {what} 'nope'; known {what}s: \['") as e:
        lookup()
    assert isinstance(e.value, KeyError) and isinstance(e.value, ValueError)
