"""Child process of test_disable_jit: the training steps of W8 (LeNet), W9 (GPT) and W10
(LSTM LM), made small, compiled and eager side by side with Numba's switch off
(NUMBA_DISABLE_JIT=1: every kernel and the vector math it calls runs as plain Python, as
the README's "Debugging a kernel" promises). Prints one JSON line per workload: the
largest difference of the losses, parameters and gradients, and how many kernels
ran as Python.

    NUMBA_DISABLE_JIT=1 TRACEJIT_CACHE_DIR=/tmp/private python tests/codegen/_disable_jit_child.py W9
"""
import json
import sys

import numpy as np

from benchmarks import cnn, gpt, lstm_lm


def _small(key):
    rng = np.random.default_rng(0)
    if key == "W8":
        cnn.BATCH = 2
        return cnn, cnn.cnn_inputs(rng)
    if key == "W9":
        return gpt, gpt.gpt_inputs(rng, batch=2, context=8, vocab=11, width=16, layers=1)
    lstm_lm.SEQ, lstm_lm.BATCH, lstm_lm.VOCAB, lstm_lm.HIDDEN = 4, 3, 13, 8
    return lstm_lm, lstm_lm.lm_inputs(rng)


def run(key) -> dict:
    """Both runners' losses of TRAIN_CHECK_STEPS steps, then parameters and gradients."""
    module, inputs = _small(key)
    got = {}
    for compiled in (False, True):
        runner = module.tracejit_runner(inputs, compiled)
        got[compiled] = runner.collect()
    kernels = runner.info()["kernels"]
    diff = max(float(np.max(np.abs(got[False][k] - got[True][k]))) for k in got[False])
    return {"workload": key, "max_diff": diff, "loss": got[True]["loss"].tolist(),
            "kernels": kernels}


if __name__ == "__main__":
    for key in sys.argv[1:] or ["W8", "W9", "W10"]:
        print(json.dumps(run(key)), flush=True)
