"""The range of a run seed, checked where seeds come in (``ocrr run``, ``ocrr sweep`` and its
config files), before any run starts; kept light: ``ocrr run`` checks its options before the
engine loads."""

# The results tables hold seeds in an int64 column (pandas, Parquet): the narrowest of a seed's
# consumers (numpy's generators and SeedSequence take any size; torch and river get 63-bit seeds
# derived from it, ocrr.systems.seeds; task ids hash its JSON). A larger seed failed as the
# results were written, after every run.
MAX_SEED = 2**63 - 1
SEED_RANGE = f">= 0 and <= {MAX_SEED} (2**63 - 1: the results tables keep seeds as int64)"
