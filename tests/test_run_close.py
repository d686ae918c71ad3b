"""`Run.train` closes every engine it opened (the run's engine, the frozen copy, the evaluation's) exactly
once, in one `finally`: when training ends well, when it raises, and when two roles share one engine."""
import pytest

import tunix_agentic.app.run as run_module
from tunix_agentic.app.run import Run


class Fake:
    "An engine that counts its closes."
    def __init__(self): self.closes = 0
    def close(self): self.closes += 1


@pytest.mark.parametrize('case', ['ends well', 'raises', 'shared'])
def test_train_closes_each_engine_once(tmp_path, monkeypatch, case):
    run = Run.from_config('calculator_quick', overrides=[
        'sft.n_demos=0', 'checkpoint.save_hf=false', 'log.tensorboard=false',
        f'log.output_dir={tmp_path}'])
    engine, frozen, evaluation = Fake(), Fake(), Fake()
    run._engine = engine
    run._eval_engine = engine if case == 'shared' else evaluation
    d = {'final_answer': 0.5}
    def grpo(self):
        if case == 'raises': raise RuntimeError('GRPO failed')
        return []
    monkeypatch.setattr(run_module, 'engine_on_copy', lambda *a, **k: frozen)
    monkeypatch.setattr(run_module, 'compilation_cache', lambda: None)
    monkeypatch.setattr(run_module, 'plot_demo', lambda *a, **k: tmp_path / 'demo.png')
    monkeypatch.setattr(Run, '_eval_before', lambda self, fr: (d, d))
    monkeypatch.setattr(Run, '_grpo', grpo)
    monkeypatch.setattr(Run, '_evaluate_after', lambda self, e, fr: (d, d))
    monkeypatch.setattr(Run, '_summary', lambda self, *a: {'seed': self.cfg.seed})
    if case == 'raises':
        with pytest.raises(RuntimeError, match='GRPO failed'): run.train()
    else: assert run.train()['seed'] == run.cfg.seed
    assert (engine.closes, frozen.closes) == (1, 1)
    assert evaluation.closes == (0 if case == 'shared' else 1)  # shared: `engine`, closed once
