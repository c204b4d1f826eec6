# shellcheck shell=bash
bl_secret() { # NAME KIND PATH [MACHINE] [optional]: the value on stdout; else why on stderr and 1 (3: missing, 4: optional and missing)
    local name=$1 kind=$2 path=$3 machine=${4:-} mode value="" m="" i
    local -a w
    if [ ! -e "$path" ]; then
        if [ "${5:-}" = optional ]; then bl_absent "$name" "$path does not exist"; return 4; fi
        echo "bridge-launch: secret $name: $path does not exist" >&2; return 3
    fi
    if [ ! -f "$path" ] || [ ! -r "$path" ]; then echo "bridge-launch: secret $name: $path is not a readable file" >&2; return 1; fi
    if [ ! -O "$path" ]; then echo "bridge-launch: secret $name: $path is not owned by $(id -un)" >&2; return 1; fi
    mode=$(stat -L -c %a -- "$path") || { echo "bridge-launch: secret $name: cannot stat $path" >&2; return 1; }
    if [ $((8#$mode & 8#077)) -ne 0 ]; then
        if [ $((8#$mode & 8#044)) -ne 0 ]; then m="readable by"; elif [ $((8#$mode & 8#022)) -ne 0 ]; then m="writable by"; else m="open to"; fi
        printf 'bridge-launch: secret %s: %s is %s group or others (mode %04o); chmod 600 %s\n' "$name" "$path" "$m" "$((8#$mode))" "$path" >&2
        return 1
    fi
    if [ "$kind" = file ]; then
        value=$(< "$path")
    else
        read -r -d '' -a w < "$path"
        for ((i = 0; i < ${#w[@]}; i++)); do
            case ${w[i]} in
                machine) i=$((i + 1)); m=${w[i]:-};;
                default) m="";;
                login|account) i=$((i + 1));;
                password) i=$((i + 1)); if [ "$m" = "$machine" ]; then value=${w[i]:-}; break; fi;;
            esac
        done
        if [ -z "$value" ]; then
            if [ "${5:-}" = optional ]; then bl_absent "$name" "$path has no password for machine $machine"; return 4; fi
            echo "bridge-launch: secret $name: $path has no password for machine $machine" >&2; return 3
        fi
    fi
    if [ -z "$value" ]; then echo "bridge-launch: secret $name: $path is empty" >&2; return 1; fi
    printf '%s' "$value"
}
bl_absent() { # NAME WHY: an optional secret whose source is not there
    if [ -n "${!1:-}" ]; then echo "bridge-launch: note: secret $1: $2; the value from sbatch's environment is used" >&2
    else echo "bridge-launch: note: secret $1: $2; the job runs without it" >&2; fi
}
with_secrets() ( # COMMAND...: COMMAND with the secrets (load_secrets, the batch script's) in its environment
    load_secrets || exit 1
    exec "$@"
)
check_secrets() { # EXIT_FILE [STOPPED_FILE]: the job's first check, in a subshell so the batch shell never holds a value
    local why rc
    why=$( (load_secrets) 2>&1 > /dev/null)
    rc=$?
    if [ -n "$why" ]; then printf '%s\n' "$why" >&2; fi
    [ "$rc" -ne 0 ] || return 0
    # a source that is missing or open to group or others fails the job here (a chain: its verdict says why)
    if [ -n "${2:-}" ] && mkdir -p "${2%/*}" && [ ! -e "$2" ]; then
        printf '%s\n' "$why" | grep -m 1 '^bridge-launch: secret ' | sed 's/^bridge-launch: //' > "$2"
    fi
    printf '%s\n' "$rc" > "$1"
    exit "$rc"
}
