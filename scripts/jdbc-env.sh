#!/usr/bin/env bash
# Fetch (once) Apache Arrow's Flight SQL JDBC driver, the one jar BI tools such
# as DBeaver load, and print its path. The JDBC test (crates/silt-server/tests/
# it/jdbc.rs) compiles and runs a small Java client with it. The jar comes from
# Maven Central through `mvn`; the JDK and Maven from Debian's packages when the
# machine lacks them. Kept outside the clone, like the Cargo target dir.
set -euo pipefail
version="${SILT_JDBC_DRIVER_VERSION:-18.3.0}"
dir="${SILT_TOOLS:-$HOME/.cache/silt-tools}"
jar="$dir/flight-sql-jdbc-driver-$version.jar"
install_debian() {
  local sudo=""
  if [ "$(id -u)" -ne 0 ]; then
    sudo="sudo"
  fi
  echo "installing $* (for the JDBC test)" >&2
  $sudo apt-get update >&2
  $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y "$@" >&2
}
if ! command -v javac >/dev/null || ! command -v java >/dev/null; then
  install_debian openjdk-17-jdk-headless
fi
if [ ! -s "$jar" ]; then
  if ! command -v mvn >/dev/null; then
    install_debian maven
  fi
  mkdir -p "$dir"
  echo "fetching org.apache.arrow:flight-sql-jdbc-driver:$version into $dir" >&2
  mvn -q -B dependency:copy "-Dartifact=org.apache.arrow:flight-sql-jdbc-driver:$version" \
    "-DoutputDirectory=$dir" >&2
fi
if [ ! -s "$jar" ]; then
  echo "the Flight SQL JDBC driver is not at $jar after fetching it" >&2
  exit 1
fi
echo "$jar"
