"""Memory and time instruments: GNU time, process RSS windows, heap profiles, sampler."""
