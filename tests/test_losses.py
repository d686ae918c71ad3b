"Losses against hand-computed and numpy reference numbers."
import numpy as np, jax, jax.numpy as jnp, pytest
from tunix_agentic.learn.losses import (grpo_advantages, drgrpo_advantages, rloo_advantages, ppo_clip_loss,
                                  zero_variance_groups, aggregate, k3_kl, LossConfig, overlong_filter,
                                  token_logprobs, masked_ce, get_advantage_fn)

def test_advantages_hand_numbers():
    r = jnp.array([2., 0, 1, 5, 5, 5])           # groups of 3: [2,0,1] and [5,5,5]
    # mean 1, population std sqrt(2/3)
    s = np.sqrt(2 / 3)
    np.testing.assert_allclose(grpo_advantages(r, 3), [1 / s, -1 / s, 0, 0, 0, 0], atol=1e-5)
    np.testing.assert_allclose(drgrpo_advantages(r, 3), [1, -1, 0, 0, 0, 0], atol=1e-6)
    # leave-one-out: 2 - (0+1)/2 = 1.5 ; 0 - 1.5 = -1.5 ; 1 - 1 = 0
    np.testing.assert_allclose(rloo_advantages(r, 3), [1.5, -1.5, 0, 0, 0, 0], atol=1e-6)
    assert zero_variance_groups(r, 3).tolist() == [False] * 3 + [True] * 3

def _np_ppo(logp, old, adv, mask, lo, hi):
    ratio = np.exp(logp - old)
    a = adv[:, None]
    pg = np.maximum(-a * ratio, -a * np.clip(ratio, 1 - lo, 1 + hi))
    clipped = (-a * np.clip(ratio, 1 - lo, 1 + hi)) > (-a * ratio)
    return pg, clipped

@pytest.mark.parametrize('agg', ['token-mean', 'seq-mean-token-mean', 'seq-mean-token-sum'])
def test_ppo_clip_matches_numpy(agg):
    rng = np.random.default_rng(0)
    logp, old = rng.normal(size=(4, 7)) * .3, rng.normal(size=(4, 7)) * .3
    adv = rng.normal(size=4)
    mask = (rng.random((4, 7)) > .3).astype(np.float32)
    pg, clipped = _np_ppo(logp, old, adv, mask, .2, .28)
    if agg == 'token-mean': want = (pg * mask).sum() / mask.sum()
    elif agg == 'seq-mean-token-mean': want = np.mean((pg * mask).sum(1) / mask.sum(1))
    else: want = np.mean((pg * mask).sum(1))
    loss, m = ppo_clip_loss(jnp.array(logp), jnp.array(old), jnp.array(adv), jnp.array(mask),
                            LossConfig(aggregation=agg))
    np.testing.assert_allclose(float(loss), want, rtol=1e-5)
    np.testing.assert_allclose(float(m['clip_frac']), (clipped * mask).sum() / mask.sum(), rtol=1e-5)

def test_kl_term_and_grad():
    logp = jnp.log(jnp.array([[0.5, 0.2]]))
    ref = jnp.log(jnp.array([[0.25, 0.2]]))
    k = k3_kl(logp, ref)
    np.testing.assert_allclose(k, [[0.5 - np.log(.5) - 1, 0]], atol=1e-6)
    cfg = LossConfig(kl_coef=0.5)
    loss, m = ppo_clip_loss(logp, logp, jnp.zeros(1), jnp.ones((1, 2)), cfg, ref_logp_bt=ref)
    np.testing.assert_allclose(float(loss), 0.5 * float(k.mean()), rtol=1e-6)
    np.testing.assert_allclose(float(m['kl']), float(k.mean()), rtol=1e-6)

def test_overlong_and_ce_and_logprobs():
    mask = jnp.ones((2, 3))
    assert overlong_filter(mask, jnp.array([1, 0])).tolist() == [[0, 0, 0], [1, 1, 1]]
    lg = jax.random.normal(jax.random.key(0), (2, 3, 5))
    t = jnp.array([[0, 1, 2], [3, 4, 0]])
    lp, ent = token_logprobs(lg, t, temperature=0.7)
    ref = jax.nn.log_softmax(lg / 0.7)
    np.testing.assert_allclose(lp, np.take_along_axis(np.array(ref), np.array(t)[..., None], -1)[..., 0],
                               rtol=1e-5)
    assert (ent > 0).all()
    np.testing.assert_allclose(float(masked_ce(lp, mask)), -float(lp.mean()), rtol=1e-6)

def test_registry_errors():
    with pytest.raises(ValueError, match='known advantage estimators'): get_advantage_fn('nope')
    with pytest.raises(ValueError, match='aggregation'): aggregate(jnp.ones((1, 1)), jnp.ones((1, 1)), 'x')
