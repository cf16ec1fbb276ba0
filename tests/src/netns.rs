//! "Hosts" of a test's own on one machine: each a network namespace with a veth pair to this
//! one (`10.231.N.2` inside, `10.231.N.1` on this side, no other route: from inside only this
//! side's address of its own link is reachable, not 127.0.0.1 and not another host's link) and
//! a UTS namespace with its own hostname. A program runs "on" a host through
//! [`Host::command`]. Deleted (namespace and link) when dropped.

use std::path::Path;
use std::process::Command;

/// One host.
pub struct Host {
    ns: String,
    link: String,
    /// Its hostname.
    pub hostname: String,
    /// Its own address.
    pub addr: String,
    /// The address of this side of its link: how it reaches services here.
    pub gateway: String,
}

fn ip(args: &[&str]) {
    let o = Command::new("ip")
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("ip {args:?}: {e} (install iproute2)"));
    assert!(
        o.status.success(),
        "ip {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&o.stderr)
    );
}

impl Host {
    /// Makes host number `n` (1..=250) named `hostname`.
    pub fn new(n: u8, hostname: &str) -> Host {
        let id = std::process::id() % 100_000;
        let ns = format!("crac-{hostname}-{id}");
        // Interface names: at most 15 bytes.
        let link = format!("crh{n}x{id}");
        let peer = format!("crn{n}x{id}");
        let (gateway, addr) = (format!("10.231.{n}.1"), format!("10.231.{n}.2"));
        // Left over by an earlier run of this very test (same pid is unlikely, but cheap).
        let _ = Command::new("ip").args(["netns", "del", &ns]).output();
        let _ = Command::new("ip").args(["link", "del", &link]).output();
        ip(&["netns", "add", &ns]);
        let host = Host {
            ns,
            link,
            hostname: hostname.to_owned(),
            addr,
            gateway,
        };
        let ns = host.ns.as_str();
        ip(&[
            "link", "add", &host.link, "type", "veth", "peer", "name", &peer,
        ]);
        ip(&["link", "set", &peer, "netns", ns]);
        ip(&[
            "addr",
            "add",
            &format!("{}/24", host.gateway),
            "dev",
            &host.link,
        ]);
        ip(&["link", "set", &host.link, "up"]);
        ip(&[
            "-n",
            ns,
            "addr",
            "add",
            &format!("{}/24", host.addr),
            "dev",
            &peer,
        ]);
        ip(&["-n", ns, "link", "set", &peer, "up"]);
        ip(&["-n", ns, "link", "set", "lo", "up"]);
        host
    }

    /// `program` run on this host: in its network namespace and a new UTS namespace named
    /// [`Host::hostname`].
    pub fn command(&self, program: impl AsRef<Path>) -> Command {
        // nsenter, not `ip netns exec`: that one also makes a mount namespace, and CRIU cannot
        // checkpoint a descriptor (the test's /dev/null) opened in another mount namespace.
        let mut c = Command::new("nsenter");
        c.arg(format!("--net=/run/netns/{}", self.ns))
            .args(["unshare", "--uts", "--", "sh", "-c"])
            .arg(r#"hostname "$0" && exec "$@""#)
            .arg(&self.hostname)
            .arg(program.as_ref());
        c
    }

    /// `hostname` as a program on this host prints it.
    pub fn hostname_seen(&self) -> String {
        let o = self.command("hostname").output().expect("hostname");
        String::from_utf8_lossy(&o.stdout).trim().to_owned()
    }
}

impl Drop for Host {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "del", &self.ns]).output();
        let _ = Command::new("ip")
            .args(["link", "del", &self.link])
            .output();
    }
}
