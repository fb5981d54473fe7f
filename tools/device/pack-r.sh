#!/usr/bin/env bash
# Packs a trimmed R runtime (Debian's R 4.2 + testthat and what it needs) for the GPU machine,
# which has no R and no package registry. Usage, from the project's root:
#   tools/device/pack-r.sh .rt          # writes .rt/r-runtime.tar.xz and .rt/setup.sh
#   echo /.rt/ >> .git/info/exclude        # keep it out of git; name .rt in the device run's carry
# On the GPU machine, at the start of the command:   source .rt/setup.sh
set -euo pipefail
dest=${1:-.rt}
mkdir -p "$dest"; dest=$(cd "$dest" && pwd)
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
pkgs="r-base-core libicu72 libblas3 liblapack3 libtirpc3 libtirpc-common libgfortran5 libreadline8 libpcre2-8-0
 r-cran-testthat r-cran-brio r-cran-callr r-cran-cli r-cran-desc r-cran-digest r-cran-ellipsis r-cran-evaluate
 r-cran-jsonlite r-cran-lifecycle r-cran-magrittr r-cran-pkgload r-cran-praise r-cran-processx r-cran-ps r-cran-r6
 r-cran-rlang r-cran-waldo r-cran-withr r-cran-glue r-cran-crayon r-cran-diffobj r-cran-rematch2 r-cran-fansi
 r-cran-generics r-cran-pillar r-cran-tibble r-cran-utf8 r-cran-vctrs r-cran-pkgconfig r-cran-rprojroot r-cran-fs r-cran-rstudioapi make"
(cd "$work" && apt-get download $pkgs >/dev/null 2>&1) || { apt-get update >/dev/null && (cd "$work" && apt-get download $pkgs >/dev/null); }
mkdir "$work/root"
for f in "$work"/*.deb; do dpkg -x "$f" "$work/root"; done
r="$work/root"
# Shared libraries go to /opt/rlibs on the GPU machine, so nothing of its own system is overwritten.
mkdir -p "$r/opt/rlibs" "$r/opt/rtools/bin"
mv "$r/usr/bin/make" "$r/opt/rtools/bin/make"
find "$r/usr/lib/x86_64-linux-gnu" "$r/lib" \( -type f -o -type l \) -name '*.so*' -exec mv {} "$r/opt/rlibs/" \; 2>/dev/null || true
rm -f "$r"/opt/rlibs/libicu{test,tu,io}.so*
rm -rf "$r/usr/lib/x86_64-linux-gnu" "$r/usr/share/doc" "$r/usr/share/man" "$r/usr/share/locale" "$r/usr/share/info" "$r/lib"
find "$r/usr/lib/R" "$r/usr/share/R" -depth -type d \( -name html -o -name help -o -name po -o -name doc -o -name tests -o -name demo \) -prune -exec rm -rf {} + 2>/dev/null || true
tar -C "$r" -cf - . | xz -9e -T2 > "$dest/r-runtime.tar.xz"
cat > "$dest/setup.sh" <<'EOS'
# source this on the GPU machine: unpacks R into /usr/lib/R, /usr/share/R, /etc/R and /opt/rlibs
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
if ! [ -x /usr/lib/R/bin/exec/R ]; then tar -C / -xJf "$here/r-runtime.tar.xz" --no-same-owner; fi
# Debian's postinst writes /etc/R/Renviron from Renviron.ucf; without it R CMD stops
[ -e /etc/R/Renviron ] || cp /usr/lib/R/etc/Renviron.ucf /etc/R/Renviron
export LD_LIBRARY_PATH="/opt/rlibs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export PATH="$PATH:/opt/rtools/bin"   # a make of our own, used only where the machine has none
Rscript -e 'cat("R", as.character(getRversion()), "ready; testthat", as.character(packageVersion("testthat")), "\n")'
EOS
du -h "$dest/r-runtime.tar.xz"
