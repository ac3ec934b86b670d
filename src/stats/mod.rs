//! Honest numbers: unbiased pass@k, standard errors, mean ± std over seeds.
