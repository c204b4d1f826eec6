# Sourced by scripts/local-slurm: pyxis + enroot for the local cluster (`start --containers`).
#
# What it does, following ../shared/reference/pyxis_enroot.md (facts measured on this kind of
# machine) and the upstream trees in ../shared/vendor (or PYXIS_SRC / ENROOT_SRC: a .tar.gz or
# a directory):
#   - builds pyxis against Debian's libslurm-dev (its Makefile, unchanged) and enroot with Debian's
#     musl, kernel headers and makeself in place of its git submodules; installs both under
#     /usr/local (enroot and its helpers must be on slurmd's PATH: pyxis execs `enroot` with
#     slurmstepd's environment, and enroot runs its helpers by name). Cached: rebuilt only when
#     the sources, the Slurm release or this recipe change ($H/containers/built.key).
#   - writes enroot.conf with per-host paths (both nodes share one filesystem and pyxis names a
#     container the same on every node) and $H/etc/plugstack.conf (Slurm reads it from
#     SLURM_CONF's directory) with pyxis' default use_squashfuse=0 as production runs it
#     (LOCAL_SLURM_SQUASHFUSE=1: the other setting). The plugin stays wired on later plain starts;
#     it acts only on jobs that name an image.
#   - puts a wrapper in enroot's place (the real one: enroot.real) that logs every `enroot create`
#     and can delay it per job (BRIDGE_LAUNCH_TEST_CREATE_DELAY), for the slow-image tests.
#   - builds $H/containers/images/local-torch.sqsh: Debian bookworm (debootstrap minbase) with
#     Python, a venv holding torch==2.13.0 (the CPU wheel this machine has), megatron-energon, hydra-core
#     and omegaconf (as NeMo images have them). No Megatron-Bridge is baked in: the tests give a job
#     the real one (a pinned revision's source, with the cached Python 3.12 venv it runs under)
#     through --container-mounts at /opt/Megatron-Bridge, where NeMo images hold it
#     (scripts/bridge/realbridge.py container()). Cached by $H/containers/images/local-torch.sqsh.key;
#     built under temporary names and renamed into place, so jobs running in the old image keep it.

CT=$H/containers
IMAGE=$CT/images/local-torch.sqsh
CT_RECIPE=3        # bump when the build steps below change (forces a rebuild)
IMAGE_RECIPE=6     # bump when the image contents change (6: no Megatron-Bridge stand-in; the tests mount the real one)
TORCH_VERSION=2.13.0
ENERGON_VERSION=7.4.1  # pyproject's `data` extra
HYDRA_VERSION=1.3.8 OMEGACONF_VERSION=2.3.1 ANTLR_VERSION=4.9.3  # hydra-core pins antlr4 4.9.*, published as an sdist only
CT_PACKAGES=(libslurm-dev gcc make libc6-dev musl-tools musl-dev linux-libc-dev makeself squashfs-tools
             squashfuse fuse-overlayfs jq parallel zstd pigz curl libcap2-bin debootstrap)
REPO_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

ct_sources() { # -> sets PYXIS_SRC ENROOT_SRC; fails with one line when they are missing
  PYXIS_SRC=${PYXIS_SRC:-$REPO_ROOT/../shared/vendor/pyxis-0.24.0.tar.gz}
  ENROOT_SRC=${ENROOT_SRC:-$REPO_ROOT/../shared/vendor/enroot-8ea147d.tar.gz}
  [[ -e $PYXIS_SRC ]] || die "pyxis sources not found at $PYXIS_SRC (set PYXIS_SRC to a pyxis .tar.gz or tree)"
  [[ -e $ENROOT_SRC ]] || die "enroot sources not found at $ENROOT_SRC (set ENROOT_SRC to an enroot .tar.gz or tree)"
}

src_hash() { # tarball or tree -> sha256 of its contents
  if [[ -d $1 ]]; then
    (cd "$1" && find . -type f ! -path './.git/*' ! -path '*/__pycache__/*' -print0 | LC_ALL=C sort -z | xargs -0 sha256sum | sha256sum | cut -d' ' -f1)
  else
    sha256sum "$1" | cut -d' ' -f1
  fi
}
unpack() { # src dest: a tarball (one top directory) or a tree, copied to dest
  rm -rf "$2"; mkdir -p "$2"
  if [[ -d $1 ]]; then cp -a "$1/." "$2/"; else tar -xzf "$1" -C "$2" --strip-components=1; fi
}

ensure_ct_packages() {
  local p missing=()
  for p in "${CT_PACKAGES[@]}"; do dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'ok installed' || missing+=("$p"); done
  ((${#missing[@]})) || return 0
  say "installing ${missing[*]} (log: $LOG/apt-containers.log)" >&2
  { apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}"; } \
    >"$LOG/apt-containers.log" 2>&1 || { tail -n 20 "$LOG/apt-containers.log" >&2; die "apt-get install failed"; }
}

build_pyxis() { # -> /usr/local/lib/slurm/spank_pyxis.so
  local b=$CT/build/pyxis dev slurmd
  dev=$(dpkg-query -W -f='${Version}' libslurm-dev) slurmd=$(dpkg-query -W -f='${Version}' slurmd)
  # a SPANK plugin must be built against the exact Slurm release that loads it
  [[ $dev == "$slurmd" ]] || die "libslurm-dev $dev differs from slurmd $slurmd; pyxis must be built against the running Slurm"
  unpack "$PYXIS_SRC" "$b"
  make -C "$b" -j"$(nproc)" >"$LOG/build-pyxis.log" 2>&1 && make -C "$b" install prefix=/usr/local >>"$LOG/build-pyxis.log" 2>&1 \
    || { tail -n 20 "$LOG/build-pyxis.log" >&2; die "building pyxis failed (log: $LOG/build-pyxis.log)"; }
}

build_enroot() { # -> /usr/local/bin/enroot (+ helpers), /usr/local/lib/enroot, /usr/local/etc/enroot
  local b=$CT/build/enroot d triple
  triple=$(gcc -dumpmachine)
  unpack "$ENROOT_SRC" "$b"
  d=$b/deps/dist
  mkdir -p "$d/musl/bin" "$d/musl/lib" "$d/linux/include" "$d/makeself/bin"
  # musl: Debian's musl-gcc specs, edited as enroot's deps/musl.patch edits musl's (static PIE)
  sed -e 's|%{!shared: \([^ ]*\)/Scrt1.o}|%{static-pie: \1/rcrt1.o} %{!static-pie: %{!shared: \1/Scrt1.o}}|' \
      -e 's|^-dynamic-linker \([^ ]*\) -nostdlib|%{static-pie:-no-dynamic-linker -static -pie} %{!static-pie:-dynamic-linker \1} -nostdlib|' \
      "/usr/lib/$(uname -m)-linux-musl/musl-gcc.specs" >"$d/musl/lib/musl-gcc.specs"
  grep -q rcrt1.o "$d/musl/lib/musl-gcc.specs" || die "could not adapt Debian's musl-gcc.specs for static PIE"
  printf '#!/bin/sh\nexec gcc "$@" -specs "%s"\n' "$d/musl/lib/musl-gcc.specs" >"$d/musl/bin/musl-gcc"
  chmod 755 "$d/musl/bin/musl-gcc"
  # kernel headers and makeself from Debian instead of the submodules
  ln -sfn /usr/include/linux "$d/linux/include/linux"
  ln -sfn /usr/include/asm-generic "$d/linux/include/asm-generic"
  ln -sfn "/usr/include/$triple/asm" "$d/linux/include/asm"
  install -m 755 /usr/bin/makeself "$d/makeself/bin/enroot-makeself"
  mkdir -p "$b/deps/musl" "$b/deps/linux-headers" "$b/deps/makeself"
  touch "$b/deps/musl/.stamp" "$b/deps/linux-headers/.stamp" "$b/deps/makeself/.stamp"
  make -C "$b" -j"$(nproc)" >"$LOG/build-enroot.log" 2>&1 && make -C "$b" install prefix=/usr/local >>"$LOG/build-enroot.log" 2>&1 \
    || { tail -n 20 "$LOG/build-enroot.log" >&2; die "building enroot failed (log: $LOG/build-enroot.log)"; }
}

enroot_conf() {
  # enroot expands these per call; $(hostname) is the node's own (each slurmd has its UTS namespace)
  cat <<EOF
# Written by scripts/local-slurm --containers; edits are overwritten.
ENROOT_RUNTIME_PATH $H/enroot/run/\$(hostname)/user-\$(id -u)
ENROOT_DATA_PATH $H/enroot/data/\$(hostname)/user-\$(id -u)
ENROOT_CACHE_PATH $H/enroot/cache/\$(hostname)/user-\$(id -u)
ENROOT_TEMP_PATH $H/enroot/tmp
ENROOT_CONNECT_TIMEOUT 10
ENROOT_MAX_PROCESSORS 2
EOF
}

ct_build() { # build and install pyxis and enroot unless the cached build matches
  local key
  ct_sources
  key="recipe=$CT_RECIPE pyxis=$(src_hash "$PYXIS_SRC") enroot=$(src_hash "$ENROOT_SRC") slurm=$(dpkg-query -W -f='${Version}' slurmd)"
  if [[ -r $CT/built.key && "$(<"$CT/built.key")" == "$key" && -f /usr/local/lib/slurm/spank_pyxis.so \
        && -x /usr/local/bin/enroot && -x /usr/local/bin/enroot-mount ]]; then
    return 0
  fi
  local t0; t0=$(now)
  say "building pyxis and enroot (logs: $LOG/build-*.log)" >&2
  mkdir -p "$CT/build"
  build_pyxis
  build_enroot
  rm -rf "$CT/build/pyxis" "$CT/build/enroot"
  printf '%s\n' "$key" >"$CT/built.key"
  say "pyxis and enroot $(enroot version) built and installed under /usr/local in $(( ($(now) - t0) / 1000 )) s" >&2
}

# --- the image -------------------------------------------------------------------------------
ct_image() { # build the squashfs image unless the cached one matches
  local key root wheels t0 tmp
  key="recipe=$IMAGE_RECIPE torch=$TORCH_VERSION energon=$ENERGON_VERSION hydra=$HYDRA_VERSION"
  if [[ -r $IMAGE.key && "$(<"$IMAGE.key")" == "$key" && -s $IMAGE ]]; then return 0; fi
  t0=$(now)
  root=$CT/build/rootfs wheels=$CT/build/wheels tmp=$IMAGE.$$.tmp
  mkdir -p "$CT/images" "$wheels"
  say "building $IMAGE: debootstrap, torch==$TORCH_VERSION, mksquashfs (a few minutes; log: $LOG/build-image.log)" >&2
  (
    set -e
    # the wheels as this machine's pip configuration finds them (the CPU torch wheel lies on disk here)
    python3 -m pip wheel -q --no-deps -w "$wheels" "antlr4-python3-runtime==$ANTLR_VERSION"  # pure Python
    python3 -m pip download -q --only-binary=:all: --find-links "$wheels" -d "$wheels" "torch==$TORCH_VERSION" numpy \
      "megatron-energon==$ENERGON_VERSION" "hydra-core==$HYDRA_VERSION" "omegaconf==$OMEGACONF_VERSION"
    ls "$wheels"/torch-"$TORCH_VERSION"*cpu*.whl >/dev/null || { echo "the CPU wheel of torch $TORCH_VERSION was not found"; exit 1; }
    rm -rf "$root"
    debootstrap --variant=minbase --include=python3,python3-venv,numactl,procps bookworm "$root" http://deb.debian.org/debian
    mkdir -p "$root/wheels"
    mount --bind "$wheels" "$root/wheels"
    trap 'umount "$root/wheels" 2>/dev/null || true' EXIT
    # a clean environment: this machine's PIP_* settings name directories the chroot does not have
    env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root chroot "$root" /usr/bin/python3 -m venv /venv
    env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root chroot "$root" /venv/bin/pip install -q --no-index \
      --find-links /wheels "torch==$TORCH_VERSION" numpy "megatron-energon==$ENERGON_VERSION" \
      "hydra-core==$HYDRA_VERSION" "omegaconf==$OMEGACONF_VERSION"
    umount "$root/wheels"; rmdir "$root/wheels"; trap - EXIT
    # where NeMo images install Megatron-Bridge: a mount point, filled by --container-mounts
    mkdir -p "$root/opt/Megatron-Bridge"
    # python and torchrun on the login PATH: enroot starts a login environment whose PATH comes
    # from the image's /etc/login.defs (enroot-switchroot.c, sys_login), as NGC images have them
    for exe in python python3 torchrun; do
      printf '#!/bin/sh\nexec /venv/bin/%s "$@"\n' "$exe" >"$root/usr/local/bin/$exe"
      chmod 755 "$root/usr/local/bin/$exe"
    done
    # enroot reads the image's /etc/environment at start (as it writes a Docker image's ENV there);
    # TOKENIZERS_PARALLELISM differs from what the local-slurm-pyxis profile sets, on purpose
    printf '%s\n' "PATH=/venv/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin" \
      "TOKENIZERS_PARALLELISM=true" "BRIDGE_LAUNCH_IMAGE=local-torch" >"$root/etc/environment"
    rm -rf "$root/var/cache/apt/archives/"*.deb "$root/root/.cache"
    # a temporary name, then a rename: a container started from the old file keeps reading it
    mksquashfs "$root" "$tmp" -noappend -comp lzo -noD -quiet -no-progress
    mv -f "$tmp" "$IMAGE"
    rm -rf "$root"
  ) >"$LOG/build-image.log" 2>&1 &
  wait $! || { umount "$root/wheels" 2>/dev/null || true; rm -f "$tmp"; tail -n 20 "$LOG/build-image.log" >&2; die "building the image failed (log: $LOG/build-image.log)"; }
  printf '%s\n' "$key" >"$IMAGE.key.$$" && mv -f "$IMAGE.key.$$" "$IMAGE.key"
  say "image $IMAGE ($(du -m "$IMAGE" | cut -f1) MB) built in $(( ($(now) - t0) / 1000 )) s" >&2
}

# --- wiring ----------------------------------------------------------------------------------
ENROOT_WRAPPER_MARK="# bridge-launch local-slurm: enroot as pyxis calls it"
CREATES_LOG=$H/enroot/creates.log

enroot_wrapper() { # /usr/local/bin/enroot: the real one (enroot.real) behind what the tests inject and count
  echo "#!/bin/bash"
  echo "$ENROOT_WRAPPER_MARK (scripts/local-slurm-containers.sh)."
  echo "creates_log=$CREATES_LOG"
  cat <<'EOF'
# pyxis runs enroot by PATH (execvpe, pyxis enroot.c:111) with the job's environment, minus the
# ENROOT_*_PATH variables (pyxis_slurmstepd.c:364-390): a job's BRIDGE_LAUNCH_TEST_CREATE_DELAY=S
# reaches this. Every `enroot create` is logged (epoch, node, container) to $creates_log, then
# waits S seconds, standing in for a registry import or the unpacking of a 30-50 GB image.
if [ "${1:-}" = create ]; then
  name=""
  for ((i = 2; i < $#; i++)); do
    if [ "${!i}" = --name ]; then j=$((i + 1)); name=${!j}; fi
  done
  echo "$(date +%s) $(hostname) $name" >> "$creates_log"
  sleep "${BRIDGE_LAUNCH_TEST_CREATE_DELAY:-0}"
fi
exec /usr/local/bin/enroot.real "$@"
EOF
}

ct_wrap_enroot() { # a fresh install (ct_build) puts the real enroot in place: it moves behind the wrapper
  if ! grep -qF "$ENROOT_WRAPPER_MARK" /usr/local/bin/enroot; then mv -f /usr/local/bin/enroot /usr/local/bin/enroot.real; fi
  put /usr/local/bin/enroot "$(enroot_wrapper)" 755
  touch "$CREATES_LOG" && chmod 666 "$CREATES_LOG"
}

ct_wire() { # enroot.conf, the enroot wrapper, runtime dirs, plugstack.conf; returns 0 when plugstack.conf changed
  mkdir -p "$H/enroot/tmp" "$H/enroot/run" "$H/enroot/data" "$H/enroot/cache"
  put /usr/local/etc/enroot/enroot.conf "$(enroot_conf)"
  ct_wrap_enroot
  # pyxis' own default, use_squashfuse=0 (pyxis config.c:41), as production runs it: every container is
  # unpacked by `enroot create`; LOCAL_SLURM_SQUASHFUSE=1 keeps the other setting testable
  put "$ETC/plugstack.conf" "# Written by scripts/local-slurm --containers: pyxis (acts only on jobs that name an image)
required /usr/local/lib/slurm/spank_pyxis.so runtime_path=$H/pyxis-run/node use_squashfuse=${LOCAL_SLURM_SQUASHFUSE:-0}"
  was_changed "$ETC/plugstack.conf"
}

containers_wired() { [[ -s $ETC/plugstack.conf && -f /usr/local/lib/slurm/spank_pyxis.so && -x /usr/local/bin/enroot ]]; }
