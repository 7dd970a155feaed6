"""sglang-sentinel: keep an SGLang server up, load it on a schedule, export it all to Prometheus."""

__version__ = "0.3.0"

__all__ = ["__version__"]
