# Shared settings for the project's scripts (sourced, not run).
# The Cargo target dir lives outside the clone so rebuilds reuse it.
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/silt-target}"
export SILT_VENV="${SILT_VENV:-$HOME/.cache/silt-venv}"
if [ "${CI:-}" = "true" ]; then
  export CARGO_TERM_COLOR=never
  export CARGO_TERM_PROGRESS_WHEN=never
fi
