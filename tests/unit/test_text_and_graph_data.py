"""The nlp and gnn data: the text reader and tokenizer, the graph reader and its normalisation, the
synthetic sets. Both frameworks call these, so what is checked here is what both get."""

import numpy as np
import pytest
from helpers import write_graph_file, write_text_folder

from bench_contract.data import datasets as data
from bench_contract.data import graph, loading, text


def test_text_lines_become_class_token_words_and_padding(tmp_path):
    root = write_text_folder(tmp_path / "text", train=50, test=10)
    ds = loading.load_dataset("nlp", "real", str(root))
    assert ds.name == "nlp" and ds.source == "real" and ds.num_classes == 2
    assert len(ds.x_train) + len(ds.x_val) == 50 and len(ds.x_test) == 10  # the blank lines are skipped
    assert ds.sample_shape == (text.SEQ_LEN,) and ds.x_train.dtype == np.int32
    assert (ds.x_train[:, 0] == text.CLS_ID).all() and (ds.x_test[:, 0] == text.CLS_ID).all()
    assert ds.x_train.max() < text.VOCAB_SIZE
    # the test file's first line, encoded by hand with the vocabulary of the training split
    label, line = (root / "test.tsv").read_text(encoding="utf-8").splitlines()[0].split("\t")
    assert ds.y_test[0] == ["science", "sport"].index(label)
    train_lines = [l.split("\t", 1)[1] for l in (root / "train.tsv").read_text(encoding="utf-8").splitlines() if l]
    order = np.random.default_rng(data.SPLIT_SEED).permutation(50)
    vocabulary = text.build_vocabulary([train_lines[i] for i in order[5:]])
    ids = [text.CLS_ID] + [vocabulary.get(w, text.UNK_ID) for w in text.words(line)]
    ids = (ids + [text.PAD_ID] * text.SEQ_LEN)[: text.SEQ_LEN]
    np.testing.assert_array_equal(ds.x_test[0], ids)


def test_tokenizer_and_vocabulary_are_deterministic():
    assert text.words("Über-cool, GOAL! x2 it's") == ["über", "cool", "goal", "x2", "it", "s"]
    vocab = text.build_vocabulary(["b a b", "c a b", "d"], size=text.SPECIAL_TOKENS + 3)
    assert vocab == {"b": 3, "a": 4, "c": 5}  # by count, ties alphabetical, truncated to the size
    ids = text.encode(["a zzz b", ""], vocab, seq_len=4)
    np.testing.assert_array_equal(ids, [[text.CLS_ID, 4, text.UNK_ID, 3], [text.CLS_ID, 0, 0, 0]])


def test_integer_labels_are_classes_in_numeric_order():
    assert text.class_names(["10", "2", "1"]) == ["1", "2", "10"]
    assert text.class_names(["neg", "pos"]) == ["neg", "pos"]


def test_malformed_text_files_are_clear_errors(tmp_path):
    with pytest.raises(data.DataError, match="lacks train.tsv, test.tsv"):
        loading.load_dataset("nlp", "real", str(tmp_path))
    root = write_text_folder(tmp_path / "t", train=10, test=4)
    (root / "test.tsv").write_text("weather\tsunny\n")
    with pytest.raises(data.DataError, match="labels that train.tsv lacks: weather"):
        loading.load_dataset("nlp", "real", str(root))
    (root / "test.tsv").write_text("no tab here\n")
    with pytest.raises(data.DataError, match=r"line 1 is not `<label>\\t<text>`"):
        loading.load_dataset("nlp", "real", str(root))


def test_synthetic_text_follows_its_rule_and_is_balanced():
    ds = loading.load_dataset("nlp", "synthetic", synthetic_samples=400)
    assert ds.source == "synthetic" and ds.num_classes == text.SYNTHETIC_CLASSES
    assert (ds.x_train[:, 0] == text.CLS_ID).all() and (ds.x_train[:, -1] == text.PAD_ID).any()
    topics = text.SPECIAL_TOKENS + np.arange(text.SYNTHETIC_CLASSES * text.TOPIC_WORDS).reshape(text.SYNTHETIC_CLASSES, -1)
    counts = np.stack([np.isin(ds.x_train, t).sum(axis=1) for t in topics], axis=1)
    np.testing.assert_array_equal(ds.y_train, counts.argmax(axis=1))
    assert np.bincount(ds.y_train).min() > 0.15 * len(ds.y_train)


def dense_normalised(n, edges):
    a = np.zeros((n, n))
    for i, j in edges.T:
        if i != j:
            a[i, j] = a[j, i] = 1
    a += np.eye(n)
    d = a.sum(axis=1) ** -0.5
    return d[:, None] * a * d[None, :]


def test_graph_edges_are_symmetrised_with_one_self_loop_each_and_normalised_like_kipf_and_welling():
    edges = np.array([[0, 1, 1, 2, 3], [1, 0, 2, 2, 0]])  # a duplicate pair, a self-loop, node 4 isolated
    g = graph.normalized_graph(edges, np.ones((5, 2)))
    dense = np.zeros((5, 5))
    np.add.at(dense, (g.target, g.source), g.weight)  # out[target] += weight * h[source]
    np.testing.assert_allclose(dense, dense_normalised(5, edges), rtol=1e-6)
    assert len(g.source) == 2 * 3 + 5 and g.source.dtype == g.target.dtype == np.int32


def test_graph_file_is_read_into_node_ids_with_the_graph_alongside(tmp_path):
    root = write_graph_file(tmp_path / "g", nodes=40)
    ds = loading.load_dataset("gnn", "real", str(root))
    with np.load(root / "graph.npz") as f:
        stored = {k: f[k] for k in f.files}
    np.testing.assert_array_equal(ds.x_train, np.flatnonzero(stored["train_mask"]))
    np.testing.assert_array_equal(ds.y_test, stored["labels"][stored["test_mask"]])
    assert ds.sample_shape == () and ds.num_classes == 3 and ds.graph.num_nodes == 40
    np.testing.assert_array_equal(ds.graph.features, stored["features"])
    dense = np.zeros((40, 40))
    np.add.at(dense, (ds.graph.target, ds.graph.source), ds.graph.weight)
    np.testing.assert_allclose(dense, dense_normalised(40, stored["edges"]), rtol=1e-6)


def test_malformed_graph_files_are_clear_errors(tmp_path):
    with pytest.raises(data.DataError, match="graph.npz does not exist"):
        loading.load_dataset("gnn", "real", str(tmp_path))
    root = write_graph_file(tmp_path / "g", nodes=20)
    with np.load(root / "graph.npz") as f:
        stored = {k: f[k] for k in f.files}
    np.savez(root / "graph.npz", **{**stored, "edges": np.array([[0], [20]])})
    with pytest.raises(data.DataError, match="outside 0..19"):
        loading.load_dataset("gnn", "real", str(root))
    del stored["val_mask"]
    np.savez(root / "graph.npz", **stored)
    with pytest.raises(data.DataError, match="lacks the arrays val_mask"):
        loading.load_dataset("gnn", "real", str(root))


def test_synthetic_graph_has_community_structure():
    ds = loading.load_dataset("gnn", "synthetic", synthetic_samples=400)
    labels = np.empty(400, np.int64)
    for x, y in ((ds.x_train, ds.y_train), (ds.x_val, ds.y_val), (ds.x_test, ds.y_test)):
        labels[x] = y
    assert len(ds.x_train) == 320 and len(ds.x_val) == len(ds.x_test) == 40
    g = ds.graph
    off = g.source != g.target
    assert np.mean(labels[g.source[off]] == labels[g.target[off]]) > 0.7  # most edges stay in a community
