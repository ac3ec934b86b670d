//! Applying patches to repositories with git2, and extracting patches from model output.
