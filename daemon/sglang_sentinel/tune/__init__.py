"""``sentinel tune``: the fastest launch configuration that still answers correctly.

Modules: ``settings`` (the ``[tune]`` section), ``space`` (configurations and their argv),
``driver`` (the loop: screen, halving, finals; resumable from the document), ``trial`` (one
configuration's server life through the supervisor), ``measure`` (correctness gate,
calibration and reference rounds), ``halving``, ``compare`` (spreads and the noise rule),
``state`` (the document on disk), ``table`` and ``snippet`` (outputs), ``gpu`` (GPU state at a
trial's start). ``report`` (the HTML report) renders the same document. See docs/tune.md.
"""
