"""The language model's contract: GPT-2's sizes and initialisation, its FLOPs per token, the token windows
both frameworks train on, and the tokens/s and model-FLOPs rows. Everything here is numpy: what both backends get."""

import math

import numpy as np
import pytest
from helpers import result_context, write_text_folder

from bench_contract.data import datasets as data
from bench_contract.data import language as lm_data
from bench_contract.data import loading
from bench_contract.measure import tokens
from bench_contract.measure.flops import Peak
from bench_contract.models import language
from bench_contract.results import ResultRows
from bench_contract.run import training


def test_the_full_variant_is_gpt2_small():
    # GPT-2 small's published size, its tied embedding counted once (Radford et al. 2019; Hugging Face's gpt2).
    assert language.parameter_count(language.GPT["full"]) == 124_439_808
    # nanoGPT's estimate_mfu for the same model: 6 N (position embedding left out) + 12 L d T per token.
    full = language.GPT["full"]
    assert language.training_flops_per_token(full) == 6 * (124_439_808 - 1024 * 768) + 12 * 12 * 768 * 1024


def test_gpt2_initialisation_scales_the_residual_projections():
    config = language.GPT["full"]
    shapes = {"tok_embed.weight": (50257, 768), "blocks.3.attn.proj.weight": (768, 768),
              "blocks.3.mlp.fc.weight": (3072, 768), "blocks.3.mlp.proj.bias": (768,),
              "blocks.3.ln_1.weight": (768,), "ln_f.bias": (768,)}
    specs = {s.name: s for s in language.param_specs(shapes, config)}
    assert (specs["tok_embed.weight"].init, specs["tok_embed.weight"].std) == ("normal", 0.02)
    assert specs["blocks.3.mlp.fc.weight"].std == 0.02
    assert specs["blocks.3.attn.proj.weight"].std == pytest.approx(0.02 / math.sqrt(24))
    assert specs["blocks.3.mlp.proj.bias"].init == "zeros" and specs["ln_f.bias"].init == "zeros"
    assert specs["blocks.3.ln_1.weight"].init == "ones"


def test_windows_are_the_next_token_of_their_inputs():
    x, y = lm_data.windows(np.arange(23, dtype=np.int32), context=4)
    assert x.shape == y.shape == (4, 4)  # 23 tokens hold four windows of 5; the last 3 are left over
    np.testing.assert_array_equal(x[1], [5, 6, 7, 8])
    np.testing.assert_array_equal(y[1], [6, 7, 8, 9])


def test_real_text_becomes_byte_windows_of_the_model_context(tmp_path):
    root = write_text_folder(tmp_path / "text", train=50, test=10)
    ds = loading.load_dataset("nlp", "real", str(root), variant="tiny", model="gpt")
    config = language.GPT["tiny"]
    assert ds.sample_shape == (config.context,) and ds.y_train.shape[1:] == (config.context,)
    assert ds.num_classes == config.vocab_size and ds.x_train.dtype == np.int32
    # The test split is test.tsv's texts, joined by newlines, as UTF-8 bytes (the labels are not read).
    texts = [line.split("\t", 1)[1] for line in (root / "test.tsv").read_text(encoding="utf-8").splitlines() if line]
    first = "\n".join(texts).encode("utf-8")[: config.context + 1]
    np.testing.assert_array_equal(ds.x_test[0], list(first[:-1]))
    np.testing.assert_array_equal(ds.y_test[0], list(first[1:]))
    assert len(ds.x_val) == (len(ds.x_train) + len(ds.x_val)) // 10


def test_text_too_short_for_one_window_is_a_clear_error(tmp_path):
    root = write_text_folder(tmp_path / "text", train=50, test=10)
    (root / "test.tsv").write_text("a\tshort\n", encoding="utf-8")
    with pytest.raises(data.DataError, match="fewer than 33 bytes of text"):
        loading.load_dataset("nlp", "real", str(root), variant="tiny", model="gpt")
    with pytest.raises(data.DataError, match="lacks train.tsv, test.tsv"):
        loading.load_dataset("nlp", "real", str(tmp_path), variant="tiny", model="gpt")


def test_synthetic_tokens_follow_their_chain_so_the_loss_can_fall():
    ds = loading.load_dataset("nlp", "synthetic", synthetic_samples=300, variant="tiny", model="gpt")
    config = language.GPT["tiny"]
    assert ds.source == "synthetic" and ds.x_train.shape[1:] == (config.context,)
    np.testing.assert_array_equal(ds.x_train[:, 1:], ds.y_train[:, :-1])  # y is x shifted by one
    successors = np.random.default_rng(data.SPLIT_SEED).integers(config.vocab_size,
                                                                size=(config.vocab_size, lm_data.SUCCESSORS))
    followed = (successors[ds.x_train] == ds.y_train[..., None]).any(axis=-1).mean()
    # 0.9 take a likely successor, and a uniform draw hits one with probability 4/256: 0.9 + 0.1 * 4/256 = 0.902,
    # over 8,640 tokens (binomial standard error 0.003); a chain without structure would give 4/256.
    assert 0.88 < followed < 0.92
    # The same data in every process: the split never follows a run's seed.
    again = loading.load_dataset("nlp", "synthetic", synthetic_samples=300, variant="tiny", model="gpt")
    np.testing.assert_array_equal(again.x_train, ds.x_train)


def test_the_classifier_still_reads_its_labelled_text():
    ds = loading.load_dataset("nlp", "synthetic", synthetic_samples=100, variant="tiny", model="transformer")
    assert ds.y_train.ndim == 1


class Predicts:
    def __init__(self, prediction):
        self.prediction = prediction

    def predict(self, x):
        return self.prediction[: len(x)]


def test_accuracy_counts_every_position_of_a_language_model():
    y = np.array([[1, 2, 3, 4], [5, 6, 7, 8]])
    predicted = np.array([[1, 2, 0, 0], [5, 0, 0, 0]])
    assert training.accuracy(Predicts(predicted), np.zeros((2, 4)), y) == 3 / 8
    assert training.accuracy(Predicts(np.array([1, 0, 3])), np.zeros((3, 4)), np.array([1, 2, 3])) == 2 / 3


def test_token_rows_are_the_sample_rows_times_the_tokens_per_sample():
    rows = ResultRows(result_context())
    tokens.record_token_throughput(rows, "throughput", 10.0, tokens_per_sample=32)
    tokens.record_token_throughput(rows, "throughput_pipelined", 8.0, tokens_per_sample=32)
    tokens.record_token_throughput(rows, "throughput", 10.0, tokens_per_sample=1)  # a classifier: no token row
    tokens.record_token_throughput(rows, "step_time_p50", 3.0, tokens_per_sample=32)
    found = {(r["metric"], r["value"], r["unit"]) for r in rows.rows}
    assert found == {("token_throughput", 320.0, "tokens/s"), ("token_throughput_pipelined", 256.0, "tokens/s")}
    assert tokens.labels_per_sample(np.zeros((5, 32))) == 32 and tokens.labels_per_sample(np.zeros(5)) == 1


def test_model_flops_utilisation_is_the_analytic_count_at_the_timed_speed():
    rows = ResultRows(result_context())
    tokens.record_model_flops(rows, flops_per_token=1e6, tokens_per_step=100, times_s=[0.5, 0.5],
                              peak=Peak(1e9, "measured"), devices=2)
    values = {r["metric"]: r["value"] for r in rows.rows}
    assert values["model_flops_per_step"] == 1e8
    assert values["model_flops_utilisation"] == pytest.approx(1e8 / 0.5 / 2e9)
    rows = ResultRows(result_context())
    tokens.record_model_flops(rows, 1e6, 100, [0.5], Peak(None, "not available: no peak on this CPU"), 1)
    assert [r["metric"] for r in rows.rows] == ["model_flops_per_step", "model_flops_utilisation"]
