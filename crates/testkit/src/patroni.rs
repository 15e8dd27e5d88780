//! A Patroni-managed PostgreSQL cluster for tests, the way Zalando's and Crunchy's operators
//! run one: etcd as the consensus store, two Patroni members with `synchronous_mode`, and
//! HAProxy routing to the leader by Patroni's REST health check (`GET /primary`), a stand-in
//! for the operator's primary Service. Everything comes from Debian's packages (`patroni`,
//! `etcd-server`, `haproxy`) and runs as plain processes; the PostgreSQL binaries are the
//! suite's (`PE_PG_BINDIR`).
//!
//! Each member lives in a network namespace of its own, joined by a veth pair to a bridge in
//! this namespace, where etcd, HAProxy and the test's executors and consumers run. So a member
//! can be cut off silently (its end of the pair set down), or cut off from etcd and its peer
//! alone while this namespace still reaches it (an nftables table in its namespace).
//!
//! Needs root (namespaces, and Patroni runs as the `postgres` OS user); everything is stopped
//! and removed on drop.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::chaos::sh;

/// Patroni's timing, as the measurements used: the leader key lives 10 s, a member
/// loops every 2 s. `loop_wait + 2 * retry_timeout <= ttl`, as Patroni requires.
const TTL: u64 = 10;
const LOOP_WAIT: u64 = 2;
const RETRY_TIMEOUT: u64 = 3;
const REST_PORT: u16 = 8008;
pub const PG_PORT: u16 = 5432;

fn quiet(args: &[&str]) {
    let _ = Command::new(args[0])
        .args(&args[1..])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
}

fn log_file(path: &Path) -> (Stdio, Stdio) {
    let f = File::options()
        .create(true)
        .append(true)
        .open(path)
        .unwrap();
    (f.try_clone().unwrap().into(), f.into())
}

/// The tail of a log, for a failure message.
pub fn tail(path: &Path, lines: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// One Patroni member: its namespace, address and files.
pub struct Member {
    pub name: String,
    pub ns: String,
    pub ip: String,
    /// This member's end of its veth pair (inside its namespace).
    far_end: String,
    pub dir: PathBuf,
    patroni: Option<Child>,
}

impl Member {
    fn in_ns(&self, args: &[&str]) {
        let mut full = vec!["ip", "netns", "exec", &self.ns];
        full.extend_from_slice(args);
        sh(&full);
    }

    fn config(&self) -> PathBuf {
        self.dir.join("patroni.yml")
    }

    pub fn log(&self) -> PathBuf {
        self.dir.join("patroni.log")
    }

    fn data(&self) -> PathBuf {
        self.dir.join("data")
    }

    /// Starts Patroni in the member's namespace as the `postgres` OS user (`setpriv` execs it,
    /// so the child is Patroni itself and a kill reaches it).
    fn start(&mut self) {
        let (out, err) = log_file(&self.log());
        let child = Command::new("ip")
            .args(["netns", "exec", &self.ns])
            .args([
                "setpriv",
                "--reuid=postgres",
                "--regid=postgres",
                "--init-groups",
                "patroni",
            ])
            .arg(self.config())
            .env("HOME", &self.dir)
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .unwrap();
        self.patroni = Some(child);
    }

    /// The postmaster's pid, from its pid file.
    fn postmaster(&self) -> Option<u32> {
        std::fs::read_to_string(self.data().join("postmaster.pid"))
            .ok()?
            .lines()
            .next()?
            .trim()
            .parse()
            .ok()
    }

    /// `kill -9` of Patroni and the postmaster.
    fn kill(&mut self) {
        if let Some(mut child) = self.patroni.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        if let Some(pid) = self.postmaster() {
            quiet(&["kill", "-KILL", &pid.to_string()]);
        }
    }
}

/// What Patroni says of one member (`patronictl list -f json`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Status {
    pub name: String,
    pub role: String,
    pub state: String,
    pub timeline: Option<i64>,
}

/// etcd, the members, HAProxy and the network between them.
pub struct Patroni {
    bridge: String,
    pub etcd_ip: String,
    pub members: Vec<Member>,
    base: PathBuf,
    etcd: Option<Child>,
    haproxy: Option<Child>,
    pub proxy_port: u16,
}

impl Patroni {
    /// Builds the network, starts etcd, two members and HAProxy, and waits until there is a
    /// leader with a synchronous standby.
    pub fn start(bindir: &Path) -> Self {
        let pid = std::process::id();
        // A /24 of our own (the storm test uses 10.213/16), on interfaces this test made.
        let net = 1 + pid % 250;
        let base = std::env::temp_dir().join(format!("pe-patroni-{pid}"));
        let _ = std::fs::remove_dir_all(&base);
        std::fs::create_dir_all(&base).unwrap();
        let bridge = format!("pebr{pid}");
        let etcd_ip = format!("10.214.{net}.2");
        sh(&["ip", "link", "add", &bridge, "type", "bridge"]);
        let mut cluster = Self {
            bridge: bridge.clone(),
            etcd_ip: etcd_ip.clone(),
            members: Vec::new(),
            base: base.clone(),
            etcd: None,
            haproxy: None,
            proxy_port: crate::free_port(),
        };
        // .1: this namespace (executors, consumers, HAProxy's checks); .2: etcd, so that a
        // member can be cut off from etcd and not from the executors.
        sh(&[
            "ip",
            "addr",
            "add",
            &format!("10.214.{net}.1/24"),
            "dev",
            &bridge,
        ]);
        sh(&[
            "ip",
            "addr",
            "add",
            &format!("{etcd_ip}/24"),
            "dev",
            &bridge,
        ]);
        sh(&["ip", "link", "set", &bridge, "up"]);
        for i in 0..2u32 {
            let member = Member {
                name: format!("m{i}"),
                ns: format!("pe-patroni-{pid}-{i}"),
                ip: format!("10.214.{net}.{}", 10 + i),
                far_end: format!("pepm{pid}{i}"),
                dir: base.join(format!("m{i}")),
                patroni: None,
            };
            let near = format!("pepb{pid}{i}");
            sh(&["ip", "netns", "add", &member.ns]);
            sh(&[
                "ip",
                "link",
                "add",
                &near,
                "type",
                "veth",
                "peer",
                "name",
                &member.far_end,
            ]);
            sh(&["ip", "link", "set", &near, "master", &bridge]);
            sh(&["ip", "link", "set", &near, "up"]);
            sh(&["ip", "link", "set", &member.far_end, "netns", &member.ns]);
            member.in_ns(&[
                "ip",
                "addr",
                "add",
                &format!("{}/24", member.ip),
                "dev",
                &member.far_end,
            ]);
            member.in_ns(&["ip", "link", "set", &member.far_end, "up"]);
            member.in_ns(&["ip", "link", "set", "lo", "up"]);
            std::fs::create_dir_all(member.dir.join("sock")).unwrap();
            cluster.members.push(member);
        }
        cluster.start_etcd();
        let scope = format!("pe-{pid}");
        for m in &cluster.members {
            std::fs::write(m.config(), member_config(&scope, m, &etcd_ip, bindir)).unwrap();
        }
        sh(&["chown", "-R", "postgres:postgres", base.to_str().unwrap()]);
        for m in &mut cluster.members {
            m.start();
        }
        cluster.start_haproxy();
        cluster.wait_healthy(Duration::from_secs(120));
        cluster
    }

    fn start_etcd(&mut self) {
        let peer = format!("http://127.0.0.1:{}", crate::free_port());
        let client = format!("http://{}:2379", self.etcd_ip);
        let (out, err) = log_file(&self.base.join("etcd.log"));
        let child = Command::new("etcd")
            .args(["--name", "pe", "--data-dir"])
            .arg(self.base.join("etcd"))
            .args(["--listen-client-urls", &client])
            .args(["--advertise-client-urls", &client])
            .args(["--listen-peer-urls", &peer])
            .args(["--initial-advertise-peer-urls", &peer])
            .args(["--initial-cluster", &format!("pe={peer}")])
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .unwrap();
        self.etcd = Some(child);
    }

    /// HAProxy as Patroni's documentation configures it: a TCP listener whose servers are
    /// checked by `GET /primary` on each member's REST port, so only the leader is routed to,
    /// and sessions to a server marked down are shut.
    fn start_haproxy(&mut self) {
        let mut cfg = format!(
            "global\n  maxconn 400\n\
             defaults\n  mode tcp\n  timeout connect 2s\n  timeout client 30m\n  timeout server 30m\n  timeout check 1s\n\
             listen primary\n  bind 127.0.0.1:{}\n  option httpchk GET /primary\n  http-check expect status 200\n\
             \x20 default-server inter 500ms fall 2 rise 1 on-marked-down shutdown-sessions\n",
            self.proxy_port
        );
        for m in &self.members {
            cfg.push_str(&format!(
                "  server {} {}:{PG_PORT} check port {REST_PORT}\n",
                m.name, m.ip
            ));
        }
        let path = self.base.join("haproxy.cfg");
        std::fs::write(&path, cfg).unwrap();
        let (out, err) = log_file(&self.base.join("haproxy.log"));
        let child = Command::new("haproxy")
            .arg("-db")
            .arg("-f")
            .arg(&path)
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .unwrap();
        self.haproxy = Some(child);
    }

    /// What etcd says of the members (empty when patronictl cannot tell).
    pub fn status(&self) -> Vec<Status> {
        let out = Command::new("patronictl")
            .arg("-c")
            .arg(self.members[0].config())
            .args(["list", "-f", "json"])
            .output();
        let Ok(out) = out else { return Vec::new() };
        let Ok(v) = serde_json::from_slice::<serde_json::Value>(&out.stdout) else {
            return Vec::new();
        };
        v.as_array()
            .map(|rows| {
                rows.iter()
                    .map(|r| Status {
                        name: r["Member"].as_str().unwrap_or_default().to_owned(),
                        role: r["Role"].as_str().unwrap_or_default().to_owned(),
                        state: r["State"].as_str().unwrap_or_default().to_owned(),
                        timeline: r["TL"].as_i64(),
                    })
                    .collect()
            })
            .unwrap_or_default()
    }

    /// The member that holds the leader key and runs, if any.
    pub fn leader(&self) -> Option<usize> {
        let status = self.status();
        let name = status
            .iter()
            .find(|s| s.role == "Leader" && s.state == "running")?
            .name
            .clone();
        self.members.iter().position(|m| m.name == name)
    }

    /// Whether member `i`'s Patroni answers `GET /primary` with 200: it holds the leader key
    /// and its PostgreSQL runs as the primary. Asked of the member directly (a few
    /// milliseconds), so that a takeover is timed closely.
    pub fn is_primary(&self, i: usize) -> bool {
        use std::io::{Read, Write};
        let addr: std::net::SocketAddr = format!("{}:{REST_PORT}", self.members[i].ip)
            .parse()
            .unwrap();
        let Ok(mut s) = std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(1)) else {
            return false;
        };
        let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
        if s.write_all(b"GET /primary HTTP/1.0\r\nHost: patroni\r\n\r\n")
            .is_err()
        {
            return false;
        }
        let mut head = [0u8; 12];
        s.read_exact(&mut head).is_ok() && head.ends_with(b" 200")
    }

    /// Waits for a member other than `not` to serve as the primary; its index.
    pub fn wait_leader(&self, not: Option<usize>, timeout: Duration) -> usize {
        let started = Instant::now();
        loop {
            if let Some(l) = (0..self.members.len())
                .filter(|i| Some(*i) != not)
                .find(|i| self.is_primary(*i))
            {
                return l;
            }
            assert!(
                started.elapsed() < timeout,
                "no new leader within {timeout:?}: {:?}\n{}",
                self.status(),
                self.logs()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Waits until one member leads and the other is its synchronous standby on the same
    /// timeline, and HAProxy routes to the leader.
    pub fn wait_healthy(&self, timeout: Duration) -> usize {
        let started = Instant::now();
        loop {
            let status = self.status();
            let leader = status
                .iter()
                .find(|s| s.role == "Leader" && s.state == "running");
            let sync = status
                .iter()
                .find(|s| s.role == "Sync Standby" && s.state == "running");
            if let (Some(l), Some(s)) = (leader, sync)
                && l.timeline.is_some()
                && l.timeline == s.timeline
                && let Some(i) = self.members.iter().position(|m| m.name == l.name)
                && self.proxy_routes()
            {
                return i;
            }
            assert!(
                started.elapsed() < timeout,
                "no leader with a synchronous standby within {timeout:?}: {status:?}\n{}",
                self.logs()
            );
            std::thread::sleep(Duration::from_millis(300));
        }
    }

    /// Whether a connection through HAProxy reaches a server.
    fn proxy_routes(&self) -> bool {
        let addr: std::net::SocketAddr = format!("127.0.0.1:{}", self.proxy_port).parse().unwrap();
        let Ok(mut s) = std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(1)) else {
            return false;
        };
        // A PostgreSQL SSLRequest: a routed connection answers 'N' or 'S'; HAProxy with no
        // server up closes it.
        use std::io::{Read, Write};
        let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
        let request = [0u8, 0, 0, 8, 4, 210, 22, 47];
        if s.write_all(&request).is_err() {
            return false;
        }
        let mut answer = [0u8; 1];
        matches!(s.read(&mut answer), Ok(1))
    }

    /// The members' and etcd's log tails, for a failure message.
    pub fn logs(&self) -> String {
        let mut text = String::new();
        for m in &self.members {
            text.push_str(&format!(
                "--- {} ({})\n{}\n",
                m.name,
                m.ip,
                tail(&m.log(), 25)
            ));
        }
        text
    }

    /// The leader crashes: `kill -9` of its Patroni and its postmaster.
    pub fn crash(&mut self, i: usize) {
        self.members[i].kill();
    }

    /// Starts a crashed member's Patroni again; it rejoins as a replica, rewinding with
    /// `pg_rewind` where its timeline diverged.
    pub fn restart(&mut self, i: usize) {
        self.members[i].start();
    }

    /// A planned switchover to member `to` (`patronictl switchover`).
    pub fn switchover(&self, from: usize, to: usize) {
        let out = Command::new("patronictl")
            .arg("-c")
            .arg(self.members[0].config())
            .args([
                "switchover",
                "--leader",
                &self.members[from].name,
                "--candidate",
                &self.members[to].name,
                "--force",
            ])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "patronictl switchover failed: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// Sets member `i`'s end of its link down (silence for everyone) or up again.
    pub fn link(&self, i: usize, up: bool) {
        let m = &self.members[i];
        m.in_ns(&[
            "ip",
            "link",
            "set",
            &m.far_end,
            if up { "up" } else { "down" },
        ]);
        if up {
            quiet(&[
                "ip", "netns", "exec", &m.ns, "ip", "neigh", "flush", "dev", &m.far_end,
            ]);
            quiet(&["ip", "neigh", "flush", "dev", &self.bridge]);
        }
    }

    /// Cuts member `i` off from etcd and its peer, silently (packets dropped both ways), while
    /// this namespace (the executors, consumers and HAProxy) still reaches it; or heals it.
    pub fn isolate(&self, i: usize, cut: bool) {
        let m = &self.members[i];
        if !cut {
            m.in_ns(&["nft", "delete", "table", "inet", "pecut"]);
            return;
        }
        let others: Vec<&str> = self
            .members
            .iter()
            .filter(|o| o.name != m.name)
            .map(|o| o.ip.as_str())
            .chain([self.etcd_ip.as_str()])
            .collect();
        let set = others.join(", ");
        m.in_ns(&["nft", "add", "table", "inet", "pecut"]);
        m.in_ns(&[
            "nft",
            "add chain inet pecut out { type filter hook output priority 0 ; }",
        ]);
        m.in_ns(&[
            "nft",
            &format!("add rule inet pecut out ip daddr {{ {set} }} drop"),
        ]);
        m.in_ns(&[
            "nft",
            "add chain inet pecut in { type filter hook input priority 0 ; }",
        ]);
        m.in_ns(&[
            "nft",
            &format!("add rule inet pecut in ip saddr {{ {set} }} drop"),
        ]);
    }

    /// A multi-host URL over every member, as libpq takes it.
    pub fn multi_host_url(&self, user: &str, db: &str) -> String {
        let hosts: Vec<String> = self
            .members
            .iter()
            .map(|m| format!("{}:{PG_PORT}", m.ip))
            .collect();
        format!(
            "postgres://{user}@{}/{db}?target_session_attrs=read-write",
            hosts.join(",")
        )
    }

    /// A URL through HAProxy (the operator's primary Service).
    pub fn proxy_url(&self, user: &str, db: &str) -> String {
        format!("postgres://{user}@127.0.0.1:{}/{db}", self.proxy_port)
    }

    /// A URL to member `i` alone.
    pub fn member_url(&self, i: usize, user: &str, db: &str) -> String {
        format!("postgres://{user}@{}:{PG_PORT}/{db}", self.members[i].ip)
    }
}

fn member_config(scope: &str, m: &Member, etcd_ip: &str, bindir: &Path) -> String {
    format!(
        "scope: {scope}
name: {name}
log:
  level: INFO
restapi:
  listen: {ip}:{REST_PORT}
  connect_address: {ip}:{REST_PORT}
etcd3:
  hosts: {etcd_ip}:2379
bootstrap:
  dcs:
    ttl: {TTL}
    loop_wait: {LOOP_WAIT}
    retry_timeout: {RETRY_TIMEOUT}
    synchronous_mode: true
    postgresql:
      use_pg_rewind: true
      parameters:
        wal_log_hints: 'on'
        max_connections: 300
        max_wal_senders: 10
  initdb:
    - encoding: UTF8
    - locale: C
  pg_hba:
    - local all all trust
    - host all all 10.214.0.0/16 trust
    - host replication all 10.214.0.0/16 trust
postgresql:
  listen: {ip}:{PG_PORT}
  connect_address: {ip}:{PG_PORT}
  data_dir: {data}
  bin_dir: {bindir}
  pgpass: {dir}/pgpass
  authentication:
    superuser:
      username: postgres
      password: unused-trust-auth
    replication:
      username: replicator
      password: unused-trust-auth
  parameters:
    unix_socket_directories: {dir}/sock
",
        name = m.name,
        ip = m.ip,
        data = m.data().display(),
        bindir = bindir.display(),
        dir = m.dir.display(),
    )
}

impl Drop for Patroni {
    fn drop(&mut self) {
        for child in [self.haproxy.take(), self.etcd.take()]
            .into_iter()
            .flatten()
        {
            let mut child = child;
            let _ = child.kill();
            let _ = child.wait();
        }
        for m in &mut self.members {
            m.kill();
        }
        // The servers' other processes end when they notice the postmaster is gone.
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline
            && self.members.iter().any(|m| {
                m.postmaster()
                    .is_some_and(|pid| Path::new(&format!("/proc/{pid}")).exists())
            })
        {
            std::thread::sleep(Duration::from_millis(100));
        }
        for m in &self.members {
            quiet(&["ip", "netns", "del", &m.ns]);
        }
        quiet(&["ip", "link", "del", &self.bridge]);
        let _ = std::fs::remove_dir_all(&self.base);
    }
}
