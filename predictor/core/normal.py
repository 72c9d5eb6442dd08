"""The standard normal's CDF and its inverse, in numpy alone.

scipy.special's ``ndtr`` and ``ndtri`` cost a third of a second to import (scipy's
array-API layer clones numpy, f2py included), more than a whole ``prism predict`` takes
after it. :func:`ndtri` is Cephes' rational approximation (S. L. Moshier, *Cephes Math
Library*, ``ndtri.c``; the code scipy.special runs), evaluated in the same order, so it
agrees with scipy's to the last bit or two; :func:`ndtr` is ``erfc`` of the standard
library, elementwise (its callers pass tens of values, not millions). Where scipy.special
is loaded already (xgboost imports it), :func:`ndtri` is its ufunc: the same values, faster.
"""
from __future__ import annotations

import math
import sys

import numpy as np

_P0 = (-5.99633501014107895267E1, 9.80010754185999661536E1, -5.66762857469070293439E1,
       1.39312609387279679503E1, -1.23916583867381258016E0)
_Q0 = (1.95448858338141759834E0, 4.67627912898881538453E0, 8.63602421390890590575E1,
       -2.25462687854119370527E2, 2.00260212380060660359E2, -8.20372256168333339912E1,
       1.59056225126211695515E1, -1.18331621121330003142E0)
_P1 = (4.05544892305962419923E0, 3.15251094599893866154E1, 5.71628192246421288162E1,
       4.40805073893200834700E1, 1.46849561928858024014E1, 2.18663306850790267539E0,
       -1.40256079171354495875E-1, -3.50424626827848203418E-2, -8.57456785154685413611E-4)
_Q1 = (1.57799883256466749731E1, 4.53907635128879210584E1, 4.13172038254672030440E1,
       1.50425385692907503408E1, 2.50464946208309415979E0, -1.42182922854787788574E-1,
       -3.80806407691578277194E-2, -9.33259480895457427372E-4)
_P2 = (3.23774891776946035970E0, 6.91522889068984211695E0, 3.93881025292474443415E0,
       1.33303460815807542389E0, 2.01485389549179081538E-1, 1.23716634817820021358E-2,
       3.01581553508235416007E-4, 2.65806974686737550832E-6, 6.23974539184983293730E-9)
_Q2 = (6.02427039364742014255E0, 3.67983563856160859403E0, 1.37702099489081330271E0,
       2.16236993594496635890E-1, 1.34204006088543189037E-2, 3.28014464682127739104E-4,
       2.89247864745380683936E-6, 6.79019408009981274425E-9)
_S2PI = 2.50662827463100050242E0
_EXPM2 = 0.13533528323661269189  # exp(-2)


def _polevl(x, coef):
    out = np.full_like(x, coef[0])
    for c in coef[1:]:
        out = out * x + c
    return out


def _p1evl(x, coef):  # the leading coefficient 1, left out of ``coef``
    out = x + coef[0]
    for c in coef[1:]:
        out = out * x + c
    return out


def ndtri(p):
    """The standard normal quantile of ``p`` (array or scalar): -inf at 0, inf at 1, nan outside.
    scipy's own where something else loaded it already (xgboost does): the same values, in C."""
    special = sys.modules.get("scipy.special")
    if special is not None:
        return special.ndtri(p)
    y0 = np.asarray(p, dtype=float)
    scalar = y0.ndim == 0
    y0 = np.atleast_1d(y0)
    out = np.full(y0.shape, np.nan)
    upper = y0 > 1.0 - _EXPM2
    y = np.where(upper, 1.0 - y0, y0)
    centre = (y > _EXPM2) & (y0 > 0) & (y0 < 1)
    if centre.any():
        yc = y[centre] - 0.5
        y2 = yc * yc
        x = yc + yc * (y2 * _polevl(y2, _P0) / _p1evl(y2, _Q0))
        out[centre] = x * _S2PI
    tail = (y <= _EXPM2) & (y0 > 0) & (y0 < 1)
    if tail.any():
        x = np.sqrt(-2.0 * np.log(y[tail]))
        x0 = x - np.log(x) / x
        z = 1.0 / x
        near = x < 8.0
        x1 = np.where(near, z * _polevl(z, _P1) / _p1evl(z, _Q1), z * _polevl(z, _P2) / _p1evl(z, _Q2))
        out[tail] = np.where(upper[tail], x0 - x1, -(x0 - x1))
    out[y0 == 0.0] = -np.inf
    out[y0 == 1.0] = np.inf
    return float(out[0]) if scalar else out


def ndtr(x):
    """The standard normal CDF of ``x`` (array or scalar), as Cephes' ``ndtr`` computes it."""
    a = np.asarray(x, dtype=float)
    flat = [_ndtr(v) for v in a.ravel().tolist()]
    return flat[0] if a.ndim == 0 else np.array(flat).reshape(a.shape)


def _ndtr(a: float) -> float:
    if math.isnan(a):
        return math.nan
    x = a * math.sqrt(0.5)
    z = abs(x)
    if z < math.sqrt(0.5):
        return 0.5 + 0.5 * math.erf(x)
    y = 0.5 * math.erfc(z)
    return 1.0 - y if x > 0 else y
