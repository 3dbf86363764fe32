# Sourced by .ci/run and .ci/newest: a learner's pip knows only PyPI. This machine's may know more
# (a folder of local wheels, extra indexes, a constraint file): ignore every pip configuration
# file and every PIP_* variable that changes what is resolved. Kept: how pip talks to the network
# (certificates, timeout) and what it prints. pip's own cache stays: it holds only files from the
# indexes pip used (here PyPI).
export PIP_CONFIG_FILE=/dev/null
for var in $(compgen -e | grep '^PIP_' || true); do
    case "$var" in
        PIP_CONFIG_FILE|PIP_CERT|PIP_CLIENT_CERT|PIP_DEFAULT_TIMEOUT|PIP_TIMEOUT|PIP_RETRIES|PIP_PROXY) ;;
        PIP_DISABLE_PIP_VERSION_CHECK|PIP_PROGRESS_BAR|PIP_NO_COLOR|PIP_NO_INPUT|PIP_CACHE_DIR) ;;
        *) echo "ignoring $var=${!var}"; unset "$var" ;;
    esac
done
