# zkcron %post ($1: the number of zkcron packages installed after this step; 1 on a first
# install, 2 on an upgrade). Plain sh, like the scriptlets Fedora's systemd macros expand to.

# The zkcron user, from /usr/lib/sysusers.d/zkcron.conf (useradd where systemd-sysusers is
# missing, e.g. in a minimal image); on every install and upgrade, since it is idempotent.
if command -v systemd-sysusers >/dev/null 2>&1; then
    systemd-sysusers zkcron.conf || :
elif ! getent passwd zkcron >/dev/null 2>&1; then
    useradd --system --user-group --home-dir / --no-create-home \
        --shell /sbin/nologin --comment "zkcron jobs" zkcron || :
fi

if [ "$1" -eq 1 ]; then
    # First install: enabled or not as the distribution's presets say (%systemd_post). Fedora
    # enables no service by default: `systemctl enable --now zkcron` does.
    systemctl --no-reload preset zkcron.service >/dev/null 2>&1 || :
fi
