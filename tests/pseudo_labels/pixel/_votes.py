"""Hand-made votes shared by the pixel labeler's tests."""
import math

LN_HALF = math.log(0.5)  # p = exp(mean logprob) = 0.5 exactly -> Cal = 0.5 at any T


def ro(answer, entropy=(0.0,), logprob=(LN_HALF,), text=None):
    out = {"answer": answer, "entropy": list(entropy), "logprob": list(logprob)}
    if text is not None:
        out["text"] = text
    return out


def temperature_scaled(p, t):
    # sigmoid(logit(p) / T) written as p^(1/T) / (p^(1/T) + (1-p)^(1/T)), a different route to the same value
    a, b = p ** (1 / t), (1 - p) ** (1 / t)
    return a / (a + b)
