"""Tests for engine.ops against slow, explicit-loop references of Caffe's forward passes.

Every reference below is written independently of the code under test: plain Python
loops over output positions in float64, following Caffe's C++ loop structure.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine import ops
from engine.ops import (
    concat,
    convolution,
    dropout,
    inner_product,
    lrn,
    pooling,
    relu,
    softmax,
    split,
)
from engine.shapes import conv_out_dim, pool_out_dim

RTOL = 1e-4
ATOL = 1e-5
# No example database: keep test runs from writing files into the repository.
FAST = settings(max_examples=40, deadline=None, database=None)


def rand(seed: int, *shape: int) -> np.ndarray:
    return np.random.default_rng(seed).uniform(-1.0, 1.0, size=shape).astype(np.float32)


def check(actual: np.ndarray, expected: np.ndarray) -> None:
    assert actual.dtype == np.float32
    assert actual.shape == expected.shape
    np.testing.assert_allclose(actual, expected, rtol=RTOL, atol=ATOL)


# ----------------------------------------------------------------------------- references


def ref_conv_dim(size: int, kernel: int, stride: int, pad: int) -> int:
    return (size + 2 * pad - kernel) // stride + 1


def ref_pool_dim(size: int, kernel: int, stride: int, pad: int, ceil_mode: bool) -> int:
    rnd = math.ceil if ceil_mode else math.floor
    out = int(rnd((size + 2 * pad - kernel) / stride)) + 1
    if pad and (out - 1) * stride >= size + pad:
        out -= 1
    return out


def ref_conv(x, w, b, stride, pad, group):
    n_, _, h_, w_ = x.shape
    o_, cg, kh, kw = w.shape
    sh, sw = stride
    ph, pw = pad
    oh = ref_conv_dim(h_, kh, sh, ph)
    ow = ref_conv_dim(w_, kw, sw, pw)
    og = o_ // group
    xd, wd = x.astype(np.float64), w.astype(np.float64)
    out = np.zeros((n_, o_, oh, ow))
    for n in range(n_):
        for o in range(o_):
            c0 = (o // og) * cg  # first input channel of this output's group
            for oy in range(oh):
                for ox in range(ow):
                    acc = 0.0 if b is None else float(b[o])
                    for ky in range(kh):
                        iy = oy * sh - ph + ky
                        if not 0 <= iy < h_:
                            continue
                        for kx in range(kw):
                            ix = ox * sw - pw + kx
                            if not 0 <= ix < w_:
                                continue
                            for ci in range(cg):
                                acc += xd[n, c0 + ci, iy, ix] * wd[o, ci, ky, kx]
                    out[n, o, oy, ox] = acc
    return out


def ref_pool(x, method, kernel, stride, pad, ceil_mode=True):
    """Direct transcription of Caffe's PoolingLayer::Forward_cpu window rules."""
    n_, c_, h_, w_ = x.shape
    kh, kw = kernel
    sh, sw = stride
    ph, pw = pad
    oh = ref_pool_dim(h_, kh, sh, ph, ceil_mode)
    ow = ref_pool_dim(w_, kw, sw, pw, ceil_mode)
    out = np.zeros((n_, c_, oh, ow))
    for n in range(n_):
        for c in range(c_):
            for py in range(oh):
                for px in range(ow):
                    hstart = py * sh - ph
                    wstart = px * sw - pw
                    if method == "max":
                        hend = min(hstart + kh, h_)
                        wend = min(wstart + kw, w_)
                        hstart, wstart = max(hstart, 0), max(wstart, 0)
                        best = -math.inf
                        for y in range(hstart, hend):
                            for xx in range(wstart, wend):
                                best = max(best, float(x[n, c, y, xx]))
                        out[n, c, py, px] = best
                    else:
                        hend = min(hstart + kh, h_ + ph)
                        wend = min(wstart + kw, w_ + pw)
                        pool_size = (hend - hstart) * (wend - wstart)
                        hstart, wstart = max(hstart, 0), max(wstart, 0)
                        hend, wend = min(hend, h_), min(wend, w_)
                        total = 0.0
                        for y in range(hstart, hend):
                            for xx in range(wstart, wend):
                                total += float(x[n, c, y, xx])
                        out[n, c, py, px] = total / pool_size
    return out


def ref_inner_product(x, w, b, axis, transpose):
    m = math.prod(x.shape[:axis])
    k = math.prod(x.shape[axis:])
    x2 = x.reshape(m, k).astype(np.float64)
    wt = w.astype(np.float64)
    o_ = w.shape[1] if transpose else w.shape[0]
    out = np.zeros((m, o_))
    for i in range(m):
        for o in range(o_):
            acc = 0.0 if b is None else float(b[o])
            for j in range(k):
                acc += x2[i, j] * (wt[j, o] if transpose else wt[o, j])
            out[i, o] = acc
    return out.reshape(*x.shape[:axis], o_)


def ref_lrn(x, local_size, alpha, beta, k):
    n_, c_, h_, w_ = x.shape
    xd = x.astype(np.float64)
    half = (local_size - 1) // 2
    out = np.zeros_like(xd)
    for c in range(c_):
        acc = np.zeros((n_, h_, w_))
        for j in range(c - half, c + half + 1):
            if 0 <= j < c_:  # channels outside [0, C) are zero padding
                acc += xd[:, j] ** 2
        out[:, c] = xd[:, c] * (k + alpha / local_size * acc) ** (-beta)
    return out


def ref_softmax(x, axis):
    xd = x.astype(np.float64)
    moved = np.moveaxis(xd, axis, -1)
    out = np.zeros_like(moved)
    for idx in np.ndindex(moved.shape[:-1]):
        row = [float(v) for v in moved[idx]]
        mx = max(row)
        exps = [math.exp(v - mx) for v in row]
        s = sum(exps)
        for j, e in enumerate(exps):
            out[idx + (j,)] = e / s
    return np.moveaxis(out, -1, axis)


def ref_relu(x, slope):
    out = np.zeros(x.shape)
    for idx in np.ndindex(x.shape):
        v = float(x[idx])
        out[idx] = v if v > 0 else slope * v
    return out


# ----------------------------------------------------------------------------- strategies


@st.composite
def conv_cases(draw):
    group = draw(st.integers(1, 3))
    cg = draw(st.integers(1, 3))
    og = draw(st.integers(1, 3))
    kh, kw = draw(st.integers(1, 4)), draw(st.integers(1, 4))
    sh, sw = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    ph, pw = draw(st.integers(0, 2)), draw(st.integers(0, 2))
    h = draw(st.integers(max(1, kh - 2 * ph), 9))
    w = draw(st.integers(max(1, kw - 2 * pw), 9))
    n = draw(st.integers(1, 2))
    has_bias = draw(st.booleans())
    seed = draw(st.integers(0, 2**32 - 1))
    x = rand(seed, n, cg * group, h, w)
    wt = rand(seed + 1, og * group, cg, kh, kw)
    b = rand(seed + 2, og * group) if has_bias else None
    return x, wt, b, (sh, sw), (ph, pw), group


@st.composite
def pool_cases(draw):
    kh, kw = draw(st.integers(1, 4)), draw(st.integers(1, 4))
    # stride <= kernel (true of real nets) keeps every window non-empty in ceil mode.
    sh, sw = draw(st.integers(1, kh)), draw(st.integers(1, kw))
    ph, pw = draw(st.integers(0, kh - 1)), draw(st.integers(0, kw - 1))
    h = draw(st.integers(max(1, kh - 2 * ph), 10))
    w = draw(st.integers(max(1, kw - 2 * pw), 10))
    n, c = draw(st.integers(1, 2)), draw(st.integers(1, 3))
    ceil_mode = draw(st.booleans())
    x = rand(draw(st.integers(0, 2**32 - 1)), n, c, h, w)
    return x, (kh, kw), (sh, sw), (ph, pw), ceil_mode


# ----------------------------------------------------------------------------- output dims


@FAST
@given(
    size=st.integers(1, 300),
    kernel=st.integers(1, 11),
    stride=st.integers(1, 5),
    pad=st.integers(0, 5),
    ceil_mode=st.booleans(),
)
def test_out_dims_match_reference(size, kernel, stride, pad, ceil_mode):
    if size + 2 * pad >= kernel:
        assert conv_out_dim(size, kernel, stride, pad) == ref_conv_dim(size, kernel, stride, pad)
        expected = ref_pool_dim(size, kernel, stride, pad, ceil_mode)
        assert pool_out_dim(size, kernel, stride, pad, ceil_mode) == expected


def test_conv_out_dim_known_values():
    assert conv_out_dim(227, 11, 4, 0) == 55  # AlexNet conv1
    assert conv_out_dim(27, 5, 1, 2) == 27  # AlexNet conv2
    assert conv_out_dim(224, 7, 2, 3) == 112  # GoogLeNet conv1
    assert conv_out_dim(10, 3, 1, 0, dilation=2) == 6


def test_pool_out_dim_known_values():
    assert pool_out_dim(55, 3, 2, 0) == 27  # AlexNet pool1
    assert pool_out_dim(27, 3, 2, 0) == 13  # AlexNet pool2
    assert pool_out_dim(13, 3, 2, 0) == 6  # AlexNet pool5
    assert pool_out_dim(112, 3, 2, 0) == 56  # GoogLeNet pool1: ceil, floor would give 55
    assert pool_out_dim(112, 3, 2, 0, ceil_mode=False) == 55
    assert pool_out_dim(28, 3, 1, 1) == 28  # inception pool branch keeps the size
    assert pool_out_dim(14, 3, 1, 1) == 14


def test_pool_out_dim_pad_correction():
    # ceil((3 + 2 - 3) / 2) + 1 = 3, but the 3rd window would start at 4 - 1 = 3 >= 3:
    # it lies entirely in padding, so Caffe drops it.
    assert pool_out_dim(3, 3, 2, 1) == 2
    assert pool_out_dim(5, 2, 2, 1) == 3  # 4 windows by ceil, last starts at 6 - 1 = 5
    assert pool_out_dim(6, 3, 2, 1) == 4  # no correction: last window starts at 5 < 6


# ----------------------------------------------------------------------------- convolution


@FAST
@given(conv_cases())
def test_convolution_matches_reference(case):
    x, w, b, stride, pad, group = case
    out = convolution(x, w, b, stride=stride, pad=pad, group=group)
    check(out, ref_conv(x, w, b, stride, pad, group))


def test_convolution_group2():
    x, w, b = rand(1, 2, 6, 7, 5), rand(2, 4, 3, 3, 3), rand(3, 4)
    out = convolution(x, w, b, stride=(2, 1), pad=(1, 0), group=2)
    assert out.shape == (2, 4, 4, 3)
    check(out, ref_conv(x, w, b, (2, 1), (1, 0), 2))
    # Group 2 must not mix channels across groups: zeroing group 1's input leaves group 0.
    x2 = x.copy()
    x2[:, 3:] = 0
    out2 = convolution(x2, w, b, stride=(2, 1), pad=(1, 0), group=2)
    np.testing.assert_array_equal(out2[:, :2], out[:, :2])


@pytest.mark.parametrize("group", [1, 2])
def test_convolution_1x1_fast_path_equals_general_path(group):
    x, w, b = rand(4, 2, 6, 5, 4), rand(5, 4, 6 // group, 1, 1), rand(6, 4)
    fast = convolution(x, w, b, group=group)
    check(fast, ref_conv(x, w, b, (1, 1), (0, 0), group))
    # pad=1 forces the im2col path; its interior must equal the fast path.
    general = convolution(x, w, b, pad=1, group=group)[:, :, 1:-1, 1:-1]
    np.testing.assert_allclose(fast, general, rtol=RTOL, atol=ATOL)


def test_convolution_alexnet_conv1_shape_and_values():
    x, w, b = rand(7, 1, 3, 35, 35), rand(8, 4, 3, 11, 11), rand(9, 4)
    out = convolution(x, w, b, stride=4)
    assert out.shape == (1, 4, 7, 7)
    check(out, ref_conv(x, w, b, (4, 4), (0, 0), 1))


def test_convolution_accepts_float64_and_returns_float32():
    x, w = rand(10, 1, 2, 4, 4).astype(np.float64), rand(11, 3, 2, 2, 2).astype(np.float64)
    out = convolution(x, w, None)
    assert out.dtype == np.float32
    check(out, ref_conv(x, w, None, (1, 1), (0, 0), 1))


def test_convolution_errors():
    x = rand(0, 1, 96, 5, 5)
    with pytest.raises(ValueError, match="dilation"):
        convolution(x, rand(1, 8, 96, 3, 3), None, dilation=2)
    with pytest.raises(ValueError, match="not divisible by group 5"):
        convolution(x, rand(1, 10, 19, 3, 3), None, group=5)
    msg = "48 input channels per group but input has 96 channels with group 1"
    with pytest.raises(ValueError, match=msg):
        convolution(x, rand(1, 8, 48, 3, 3), None)
    with pytest.raises(ValueError, match="bias"):
        convolution(x, rand(1, 8, 96, 3, 3), rand(2, 7))
    with pytest.raises(ValueError, match="does not fit"):
        convolution(x, rand(1, 8, 96, 7, 7), None)
    with pytest.raises(ValueError, match="4-D"):
        convolution(x[0], rand(1, 8, 96, 3, 3), None)


# ----------------------------------------------------------------------------- pooling


@FAST
@given(pool_cases(), st.sampled_from(["max", "ave"]))
def test_pooling_matches_reference(case, method):
    x, kernel, stride, pad, ceil_mode = case
    out = pooling(x, method, kernel=kernel, stride=stride, pad=pad, ceil_mode=ceil_mode)
    check(out, ref_pool(x, method, kernel, stride, pad, ceil_mode))


@pytest.mark.parametrize("method", ["max", "ave"])
@pytest.mark.parametrize(
    ("size", "kernel", "stride", "pad", "expected"),
    [(55, 3, 2, 0, 27), (13, 3, 2, 0, 6), (112, 3, 2, 0, 56), (14, 3, 1, 1, 14)],
)
def test_pooling_network_shapes(method, size, kernel, stride, pad, expected):
    x = rand(size, 1, 2, size, size)
    out = pooling(x, method, kernel=kernel, stride=stride, pad=pad)
    assert out.shape == (1, 2, expected, expected)
    check(out, ref_pool(x, method, (kernel,) * 2, (stride,) * 2, (pad,) * 2))


def test_max_pooling_ignores_padding():
    x = -np.ones((1, 1, 3, 3), np.float32) - np.arange(9, dtype=np.float32).reshape(1, 1, 3, 3)
    out = pooling(x, "max", kernel=3, stride=1, pad=1)
    # All inputs are negative; zero padding winning would show up as 0.
    expected = np.array([[-1, -1, -2], [-1, -1, -2], [-4, -4, -5]], np.float32)
    np.testing.assert_array_equal(out[0, 0], expected)


def test_ave_pooling_counts_padding_in_divisor():
    x = np.ones((1, 1, 3, 3), np.float32)
    out = pooling(x, "ave", kernel=3, stride=1, pad=1)
    # Corner windows hold 4 real cells of 9 (pad cells count), edges 6 of 9.
    expected = np.array([[4, 6, 4], [6, 9, 6], [4, 6, 4]], np.float32) / 9
    np.testing.assert_allclose(out[0, 0], expected, rtol=RTOL, atol=ATOL)


def test_ave_pooling_ceil_overhang_clips_divisor_to_size_plus_pad():
    x = np.ones((1, 1, 4, 4), np.float32)
    out = pooling(x, "ave", kernel=3, stride=2, pad=1)
    # Row windows start at -1, 1, 3 and end at min(start + 3, 4 + 1) = 2, 4, 5:
    # extents 3, 3, 2 with 2, 3, 1 real rows.
    frac = np.array([2 / 3, 1.0, 1 / 2])
    np.testing.assert_allclose(out[0, 0], np.outer(frac, frac), rtol=RTOL, atol=ATOL)


def test_pooling_pad_correction_shape():
    x = rand(12, 1, 1, 3, 3)
    for method in ("max", "ave"):
        out = pooling(x, method, kernel=3, stride=2, pad=1)
        assert out.shape == (1, 1, 2, 2)
        check(out, ref_pool(x, method, (3, 3), (2, 2), (1, 1)))


def test_global_pooling():
    x = rand(13, 2, 3, 7, 5)
    mx = pooling(x, "max", global_pooling=True)
    av = pooling(x, "ave", global_pooling=True)
    assert mx.shape == av.shape == (2, 3, 1, 1)
    assert mx.dtype == av.dtype == np.float32
    for n in range(2):
        for c in range(3):
            vals = [float(v) for v in x[n, c].ravel()]
            assert mx[n, c, 0, 0] == max(vals)
            mean = math.fsum(vals) / len(vals)
            assert math.isclose(av[n, c, 0, 0], mean, rel_tol=RTOL, abs_tol=ATOL)
    # Equivalent to a full-plane kernel.
    check(av, ref_pool(x, "ave", (7, 5), (1, 1), (0, 0)))


def test_pooling_errors():
    x = rand(14, 1, 1, 6, 6)
    with pytest.raises(ValueError, match="method"):
        pooling(x, "stochastic", kernel=2)
    with pytest.raises(ValueError, match="kernel"):
        pooling(x, "max")
    with pytest.raises(ValueError, match="pad"):
        pooling(x, "max", kernel=2, pad=2)
    with pytest.raises(ValueError, match="global pooling"):
        pooling(x, "ave", global_pooling=True, pad=1)


# ----------------------------------------------------------------------------- inner product


@FAST
@given(
    shape=st.lists(st.integers(1, 4), min_size=2, max_size=4),
    out_dim=st.integers(1, 5),
    transpose=st.booleans(),
    has_bias=st.booleans(),
    data=st.data(),
)
def test_inner_product_matches_reference(shape, out_dim, transpose, has_bias, data):
    axis = data.draw(st.integers(1, len(shape) - 1))
    seed = data.draw(st.integers(0, 2**32 - 1))
    x = rand(seed, *shape)
    k = math.prod(shape[axis:])
    w = rand(seed + 1, k, out_dim) if transpose else rand(seed + 1, out_dim, k)
    b = rand(seed + 2, out_dim) if has_bias else None
    out = inner_product(x, w, b, axis=axis, transpose=transpose)
    assert out.shape == tuple(shape[:axis]) + (out_dim,)
    check(out, ref_inner_product(x, w, b, axis, transpose))


def test_inner_product_fc6_like_and_errors():
    x, w, b = rand(15, 2, 16, 3, 3), rand(16, 10, 144), rand(17, 10)
    check(inner_product(x, w, b), ref_inner_product(x, w, b, 1, False))
    with pytest.raises(ValueError, match="144 features"):
        inner_product(x, rand(18, 10, 100), None)
    with pytest.raises(ValueError, match="bias"):
        inner_product(x, w, rand(19, 9))


def test_inner_product_unaligned_weight():
    # Weights parsed with np.frombuffer at an odd offset are unaligned; results must not change.
    w = rand(22, 6, 20)
    raw = b"\0" + w.tobytes()
    w_unaligned = np.frombuffer(raw, dtype=np.float32, offset=1).reshape(6, 20)
    assert not w_unaligned.flags.aligned
    x, b = rand(23, 3, 20), rand(24, 6)
    check(inner_product(x, w_unaligned, b), ref_inner_product(x, w, b, 1, False))


# ----------------------------------------------------------------------------- relu


@FAST
@given(
    shape=st.lists(st.integers(1, 5), min_size=1, max_size=4),
    slope=st.sampled_from([0.0, 0.1, 0.01, 1.5]),
    seed=st.integers(0, 2**32 - 1),
)
def test_relu_matches_reference(shape, slope, seed):
    x = rand(seed, *shape)
    expected = ref_relu(x, slope)
    check(relu(x, negative_slope=slope), expected)
    # In place, as Caffe runs it: result lands in (and is) x.
    res = relu(x, negative_slope=slope, out=x)
    assert res is x
    check(x, expected)


def test_relu_in_place_and_negative_slope_values():
    x = np.array([-2.0, -0.5, 0.0, 3.0], np.float32)
    np.testing.assert_array_equal(relu(x), [0.0, 0.0, 0.0, 3.0])
    np.testing.assert_array_equal(x, [-2.0, -0.5, 0.0, 3.0])  # not in place by default
    out = relu(x, negative_slope=0.1, out=x)
    assert out is x
    np.testing.assert_allclose(x, [-0.2, -0.05, 0.0, 3.0], rtol=1e-6)


# ----------------------------------------------------------------------------- lrn


@FAST
@given(
    n=st.integers(1, 2),
    c=st.integers(1, 9),
    h=st.integers(1, 5),
    w=st.integers(1, 5),
    local_size=st.sampled_from([1, 3, 5, 7]),
    alpha=st.floats(1e-4, 2.0),
    beta=st.sampled_from([0.75, 0.5, 1.0, 0.3]),
    k=st.sampled_from([1.0, 2.0, 0.5]),
    seed=st.integers(0, 2**32 - 1),
)
def test_lrn_matches_reference(n, c, h, w, local_size, alpha, beta, k, seed):
    x = rand(seed, n, c, h, w) * 3
    check(lrn(x, local_size, alpha, beta, k), ref_lrn(x, local_size, alpha, beta, k))


def test_lrn_alexnet_params():
    x = rand(20, 1, 12, 4, 4) * 50
    check(lrn(x, 5, 1e-4, 0.75, 2.0), ref_lrn(x, 5, 1e-4, 0.75, 2.0))
    with pytest.raises(ValueError, match="odd"):
        lrn(x, local_size=4)


# ----------------------------------------------------------------------------- softmax


@FAST
@given(
    shape=st.lists(st.integers(1, 5), min_size=1, max_size=4),
    seed=st.integers(0, 2**32 - 1),
    data=st.data(),
)
def test_softmax_matches_reference(shape, seed, data):
    axis = data.draw(st.integers(-len(shape), len(shape) - 1))
    x = rand(seed, *shape) * 10
    check(softmax(x, axis=axis), ref_softmax(x, axis))


def test_softmax_is_numerically_stable():
    x = np.array([[1000.0, 1001.0, 999.0], [-1000.0, -1000.0, -1000.0]], np.float32)
    out = softmax(x, axis=1)
    assert np.all(np.isfinite(out))
    check(out, ref_softmax(x, 1))


# ----------------------------------------------------------------------------- concat / identity


@FAST
@given(
    base=st.lists(st.integers(1, 4), min_size=1, max_size=4),
    sizes=st.lists(st.integers(1, 4), min_size=1, max_size=4),
    seed=st.integers(0, 2**32 - 1),
    data=st.data(),
)
def test_concat_matches_reference(base, sizes, seed, data):
    axis = data.draw(st.integers(0, len(base) - 1))
    xs = []
    for i, s in enumerate(sizes):
        shape = list(base)
        shape[axis] = s
        xs.append(rand(seed + i, *shape))
    expected_shape = list(base)
    expected_shape[axis] = sum(sizes)
    expected = np.zeros(expected_shape)
    offset = 0
    for a in xs:
        for idx in np.ndindex(a.shape):
            dst = list(idx)
            dst[axis] += offset
            expected[tuple(dst)] = a[idx]
        offset += a.shape[axis]
    check(concat(xs, axis=axis), expected)


def test_concat_errors():
    with pytest.raises(ValueError, match="incompatible"):
        concat([rand(0, 1, 2, 3, 3), rand(1, 1, 2, 4, 3)], axis=1)
    with pytest.raises(ValueError, match="at least one"):
        concat([])


def test_dropout_and_split_return_same_object():
    x = rand(21, 2, 3, 4, 4)
    assert dropout(x) is x
    assert split(x) is x


def _traced_scratch(fn, *args, out_aliases_input: bool = False, **kwargs) -> int:
    """Bytes numpy held at the peak of ``fn(*args)`` beyond its inputs and its output."""
    import tracemalloc

    tracemalloc.start()
    tracemalloc.reset_peak()
    base = tracemalloc.get_traced_memory()[0]
    out = fn(*args, **kwargs)
    peak = tracemalloc.get_traced_memory()[1] - base
    tracemalloc.stop()
    return peak - (0 if out_aliases_input else out.nbytes)


@pytest.mark.parametrize("case", [
    ("Convolution", dict(stride=(2, 2), pad=(1, 1), group=1), (2, 3, 13, 11), (6, 3, 3, 3)),
    ("Convolution", dict(stride=(1, 1), pad=(0, 0), group=2), (1, 4, 9, 9), (6, 2, 5, 5)),
    ("Convolution", dict(stride=(1, 1), pad=(0, 0), group=1), (2, 8, 7, 7), (4, 8, 1, 1)),
    ("Pooling", dict(method="max", kernel=(3, 3), stride=(2, 2), pad=(0, 0),
                     global_pooling=False, ceil_mode=True), (2, 4, 13, 13), None),
    ("Pooling", dict(method="ave", kernel=(3, 3), stride=(1, 1), pad=(1, 1),
                     global_pooling=False, ceil_mode=True), (1, 4, 10, 10), None),
    ("Pooling", dict(method="ave", kernel=(10, 10), stride=(1, 1), pad=(0, 0),
                     global_pooling=True, ceil_mode=True), (1, 4, 10, 10), None),
    ("LRN", dict(local_size=5, alpha=1e-4, beta=0.75, k=1.0), (2, 16, 6, 6), None),
    ("LRN", dict(local_size=3, alpha=1e-4, beta=0.5, k=2.0), (1, 16, 6, 6), None),
    ("Softmax", dict(axis=1), (4, 1000), None),
    ("ReLU", dict(negative_slope=0.1), (2, 8, 5, 5), None),
])
def test_scratch_bytes_are_what_numpy_allocates(case):
    """engine.ops.scratch_bytes, which the model's memory replay uses, against what
    tracemalloc sees the operator allocate beyond its output, give or take numpy's
    iterator buffers (8192 elements of 4 bytes per buffered operand of a ufunc or copy:
    on these small shapes they are as large as the arrays, on real layers negligible)."""
    layer_type, args, in_shape, w_shape = case
    rng = np.random.default_rng(0)
    x = rng.standard_normal(in_shape, dtype=np.float32)
    params = (w_shape,) if w_shape else ()
    if layer_type == "Convolution":
        w = rng.standard_normal(w_shape, dtype=np.float32)
        traced = _traced_scratch(ops.convolution, x, w, None, **args)
    elif layer_type == "Pooling":
        traced = _traced_scratch(ops.pooling, x, **args)
    elif layer_type == "LRN":
        traced = _traced_scratch(ops.lrn, x, **args)
    elif layer_type == "Softmax":
        traced = _traced_scratch(ops.softmax, x, **args)
    else:
        traced = _traced_scratch(ops.relu, x, **args)
    expected = ops.scratch_bytes(layer_type, args, params, [in_shape])
    assert expected <= traced <= expected + 2 * 8192 * 4 + 1024, (traced, expected)
