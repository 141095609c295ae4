"""Development helpers: private servers for tests, the example and benchmarks.

Nothing here is part of the distributed package.
"""
