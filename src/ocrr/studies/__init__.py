"""Studies built from the same parts: the scale study, shift calibration, the CMR preset."""
