"""The river family: river's online classifiers and their bit-exact numpy mirrors."""
