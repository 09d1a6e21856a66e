"""ImageNet names from torchvision's metadata; top-k with softmax scores; top-1 agreement, top-5 overlap, top-1 in
top-5 and the top-2 margin."""
import numpy as np

from cnnvideo.results import labels


def test_categories_are_imagenet_1k():
    """1000 names; known indices (151 Chihuahua .. 268 Mexican hairless are dogs; 249 malamute)."""
    cats = labels.categories()
    assert len(cats) == 1000
    assert cats[151] == "Chihuahua" and cats[249] == "malamute" and cats[268] == "Mexican hairless"
    assert labels.name(5000) == "class 5000"


def test_topk_orders_by_softmax_score():
    """topk gives (index, name, score) best first; scores are softmax probabilities."""
    logits = np.zeros((1, 1000), dtype=np.float32)
    logits[0, 249], logits[0, 7] = 5.0, 3.0
    best = labels.topk(logits, 3)
    assert [b[0] for b in best[:2]] == [249, 7] and best[0][1] == "malamute"
    p = np.exp(5.0) / (np.exp(5.0) + np.exp(3.0) + 998)
    assert abs(best[0][2] - p) < 1e-6 and best[0][2] > best[1][2] > best[2][2]


def test_agreement_and_overlap():
    """top1_agreement is the share of equal top-1s; top5_overlap the mean share of the reference's top-5 kept."""
    rng = np.random.RandomState(0)
    ref = [rng.randn(1000) for _ in range(4)]
    same = [r.copy() for r in ref]
    assert labels.top1_agreement(same, ref) == 1.0 and labels.top5_overlap(same, ref) == 1.0
    moved = [r.copy() for r in ref]
    moved[0][labels.topk(ref[0], 5)[0][0]] = -100.0  # frame 0 loses its top-1: 4 of its top-5 remain
    assert labels.top1_agreement(moved, ref) == 0.75
    assert abs(labels.top5_overlap(moved, ref) - (3 + 0.8) / 4) < 1e-9
    assert labels.top1_agreement([], []) is None


def test_top1_in_top5_and_margin():
    """top1_in_top5 counts frames whose reference top-1 is still among the top-5; top2_margin is best minus next."""
    ref = [np.arange(1000, dtype=np.float32), np.arange(1000, dtype=np.float32)]
    swapped = [r.copy() for r in ref]
    swapped[0][999], swapped[0][998] = 998.0, 999.0  # top-1 flips to the runner-up: still in the top-5
    swapped[1][999] = -1.0  # the reference's best falls out of the top-5
    assert labels.top1_agreement(swapped, ref) == 0.0 and labels.top1_in_top5(swapped, ref) == 0.5
    assert labels.top2_margin(np.array([0.1, 5.0, 4.75])) == 0.25 and labels.top1_in_top5([], []) is None
