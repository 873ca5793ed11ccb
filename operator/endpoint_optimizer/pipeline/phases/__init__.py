"""The pipeline's phases, one module per stretch of the lifecycle.

Each phase function takes the wake-up's context and returns the next phase to run in
the same wake-up, or DONE (see `pipeline.wakeup`); `pipeline.decide` runs them in a
bounded loop, which is the transition map.
"""
