// Loads 50-bigfleet-libvirt.rules in a minimal polkit shim and checks what it
// allows and denies. Run: node --test deploy/host-setup/polkit/
"use strict";

const test = require("node:test");
const assert = require("node:assert/strict");
const fs = require("node:fs");
const path = require("node:path");
const vm = require("node:vm");

const RULE_FILE = path.join(__dirname, "50-bigfleet-libvirt.rules");

// polkit's JavaScript API, as far as rules use it: polkit.addRule,
// polkit.Result, polkit.log; action.id + action.lookup(); subject.user,
// subject.isInGroup(), subject.local/active.
const Result = Object.freeze({
  NO: "no",
  YES: "yes",
  AUTH_SELF: "auth_self",
  AUTH_SELF_KEEP: "auth_self_keep",
  AUTH_ADMIN: "auth_admin",
  AUTH_ADMIN_KEEP: "auth_admin_keep",
  NOT_HANDLED: null,
});

function loadRules() {
  const rules = [];
  const polkit = {
    Result,
    addRule(fn) {
      assert.equal(typeof fn, "function");
      rules.push(fn);
    },
    addAdminRule() {},
    log() {},
    spawn() {
      throw new Error("rule must not spawn programs");
    },
  };
  const src = fs.readFileSync(RULE_FILE, "utf8");
  vm.runInNewContext(src, { polkit }, { filename: RULE_FILE });
  assert.equal(rules.length, 1, "the file registers exactly one rule");
  return rules;
}

// check mirrors polkitd: rules run in order, the first non-null answer wins;
// null/undefined means "not handled" (polkitd then uses the action's
// defaults, which this test reports as "default").
function check(rules, id, details, user = "bigfleet", groups = ["bigfleet", "libvirt"]) {
  const action = {
    id,
    lookup(key) {
      return Object.prototype.hasOwnProperty.call(details, key) ? details[key] : undefined;
    },
  };
  const subject = {
    user,
    groups,
    pid: 4242,
    local: false,
    active: false,
    session: "",
    seat: "",
    system_unit: "",
    isInGroup(g) {
      return groups.includes(g);
    },
    isInNetGroup() {
      return false;
    },
  };
  for (const rule of rules) {
    const r = rule(action, subject);
    if (r !== undefined && r !== null) {
      return r;
    }
  }
  return "default";
}

const rules = loadRules();
const api = (s) => "org.libvirt.api." + s;
const dom = (name) => ({ connect_driver: "QEMU", domain_name: name, domain_uuid: "8a2f…" });
const vol = (name, pool = "default", driver = "QEMU") => ({
  connect_driver: driver,
  pool_name: pool,
  pool_uuid: "b1c2…",
  vol_name: name,
  vol_key: "/var/lib/libvirt/images/" + name,
});
const net = (name, driver = "QEMU") => ({ connect_driver: driver, network_name: name, network_uuid: "c3d4…" });
const OURS = "bf-libvirt-m-0001-1a2b3c4d";

test("allows every permission the provider uses on its own objects", () => {
  const cases = [
    ["connect.getattr", { connect_driver: "QEMU" }],
    ["connect.getattr", { connect_driver: "network" }],
    ["connect.read", { connect_driver: "QEMU" }],
    ["connect.search-domains", { connect_driver: "QEMU" }],
    ["domain.getattr", dom(OURS)],
    ["domain.read", dom(OURS)],
    ["domain.write", dom(OURS)],
    ["domain.save", dom(OURS)],
    ["domain.start", dom(OURS)],
    ["domain.stop", dom(OURS)],
    ["domain.delete", dom(OURS)],
    ["domain.migrate", dom(OURS)],
    ["domain.read-secure", dom(OURS)],
    ["storage-pool.getattr", { connect_driver: "QEMU", pool_name: "default" }],
    ["storage-pool.read", { connect_driver: "storage", pool_name: "default" }],
    ["storage-vol.getattr", vol(OURS + ".qcow2")],
    ["storage-vol.read", vol(OURS + ".qcow2")],
    ["storage-vol.create", vol(OURS + ".qcow2")],
    ["storage-vol.create", vol(OURS + "-seed.iso", "default", "storage")],
    ["storage-vol.data-write", vol(OURS + "-seed.iso")],
    ["storage-vol.delete", vol(OURS + ".qcow2")],
    ["storage-vol.getattr", vol("golden.qcow2")],
    ["storage-vol.read", vol("golden.qcow2")],
    ["network.getattr", net("default")],
    ["network.read", net("default", "network")],
    ["network-port.create", net("default", "network")],
    ["network-port.delete", net("default", "network")],
  ];
  for (const [perm, details] of cases) {
    assert.equal(check(rules, api(perm), details), Result.YES, perm + " " + JSON.stringify(details));
  }
});

test("denies foreign domains, including read-only access", () => {
  for (const perm of ["getattr", "read", "write", "save", "start", "stop", "delete", "migrate", "read-secure"]) {
    for (const name of ["prod-db", "bf-", "xbf-foo", "BF-upper", "", undefined]) {
      assert.equal(check(rules, api("domain." + perm), dom(name)), Result.NO, perm + " on " + name);
    }
  }
});

test("denies the golden image and foreign volumes for write-type permissions", () => {
  for (const perm of ["create", "delete", "data-write"]) {
    assert.equal(check(rules, api("storage-vol." + perm), vol("golden.qcow2")), Result.NO, perm + " golden");
    assert.equal(check(rules, api("storage-vol." + perm), vol("other-vm.qcow2")), Result.NO, perm + " foreign");
  }
  assert.equal(check(rules, api("storage-vol.read"), vol("other-vm.qcow2")), Result.NO);
  assert.equal(check(rules, api("storage-vol.getattr"), vol("other-vm.qcow2")), Result.NO);
});

test("denies objects in other pools and networks", () => {
  assert.equal(check(rules, api("storage-vol.create"), vol(OURS + ".qcow2", "images")), Result.NO);
  assert.equal(check(rules, api("storage-pool.getattr"), { connect_driver: "QEMU", pool_name: "images" }), Result.NO);
  assert.equal(check(rules, api("network.read"), net("prod-vlan")), Result.NO);
  assert.equal(check(rules, api("network-port.create"), net("prod-vlan", "network")), Result.NO);
});

test("denies permissions the provider does not use, even on its own objects", () => {
  const unlisted = [
    ["domain.open-graphics", dom(OURS)],
    ["domain.open-device", dom(OURS)],
    ["domain.block-read", dom(OURS)],
    ["domain.mem-read", dom(OURS)],
    ["domain.core-dump", dom(OURS)],
    ["domain.snapshot", dom(OURS)],
    ["domain.open-namespace", dom(OURS)],
    ["storage-vol.data-read", vol(OURS + ".qcow2")],
    ["storage-vol.resize", vol(OURS + ".qcow2")],
    ["storage-vol.format", vol(OURS + ".qcow2")],
    ["storage-pool.delete", { connect_driver: "QEMU", pool_name: "default" }],
    ["storage-pool.write", { connect_driver: "QEMU", pool_name: "default" }],
    ["storage-pool.search-storage-vols", { connect_driver: "QEMU", pool_name: "default" }],
    ["network.write", net("default")],
    ["network.stop", net("default")],
    ["connect.write", { connect_driver: "QEMU" }],
    ["connect.search-secrets", { connect_driver: "QEMU" }],
    ["connect.search-node-devices", { connect_driver: "QEMU" }],
    ["connect.pm-control", { connect_driver: "QEMU" }],
    ["secret.read-secure", { connect_driver: "QEMU", secret_usage_volume: "x" }],
    ["node-device.detach", { connect_driver: "QEMU", node_device_name: "pci_0000_00_1f_2" }],
    ["interface.write", { connect_driver: "QEMU", interface_name: "eth0" }],
    ["no-such-object.read", { connect_driver: "QEMU" }],
  ];
  for (const [perm, details] of unlisted) {
    assert.equal(check(rules, api(perm), details), Result.NO, perm);
  }
});

// Each step of a managed live migration (virDomainMigrate3 with the
// provider holding both connections) and the permissions libvirt checks
// for it (remote_protocol.x @acl): the source's and the destination's
// steps, on the provider's domain.
const MIGRATION_STEPS = {
  "GetXMLDesc(MIGRATABLE) for DEST_XML (source)": ["domain.read", "domain.read-secure"],
  "Begin3 (source)": ["domain.migrate"],
  "Prepare3 (destination)": ["domain.migrate", "domain.start", "domain.write"],
  "Perform3 (source)": ["domain.migrate"],
  "Finish3 (destination)": ["domain.migrate"],
  "Confirm3 (source)": ["domain.migrate"],
  "AbortJob at the deadline (source)": ["domain.write"],
};

test("allows every step of a live migration of the provider's own domain", () => {
  for (const [step, perms] of Object.entries(MIGRATION_STEPS)) {
    for (const perm of perms) {
      assert.equal(check(rules, api(perm), dom(OURS)), Result.YES, step + ": " + perm);
    }
  }
});

test("migration stays within the provider's domains and needs nothing more", () => {
  // Not a foreign domain, not through another driver, not another user.
  for (const name of ["prod-db", "bf-", "xbf-foo", undefined]) {
    assert.equal(check(rules, api("domain.migrate"), dom(name)), Result.NO, "migrate " + name);
    assert.equal(check(rules, api("domain.read-secure"), dom(name)), Result.NO, "read-secure " + name);
  }
  assert.equal(check(rules, api("domain.migrate"), { connect_driver: "LXC", domain_name: OURS }), Result.NO, "LXC");
  assert.equal(check(rules, api("domain.migrate"), dom(OURS), "alice", ["libvirt"]), "default", "another user");
  // What a migration does not need stays refused: the guest's memory and
  // disks (the copy is QEMU's, between the daemons), secrets, the host's
  // configuration, snapshots.
  for (const perm of ["domain.mem-read", "domain.block-read", "domain.block-write",
    "domain.core-dump", "domain.hibernate", "domain.snapshot", "domain.open-device", "connect.write"]) {
    assert.equal(check(rules, api(perm), dom(OURS)), Result.NO, perm);
  }
  // Every permission of those steps is granted.
  const needed = new Set(Object.values(MIGRATION_STEPS).flat().map(api));
  for (const id of needed) {
    assert.ok(GRANTED.has(id), id + " needed by a migration but not granted");
  }
});

test("denies domain calls through another hypervisor driver", () => {
  for (const driver of ["LXC", "Xen", "Test", "storage", undefined]) {
    assert.equal(check(rules, api("domain.start"), { connect_driver: driver, domain_name: OURS }), Result.NO, String(driver));
  }
  assert.equal(check(rules, api("connect.getattr"), { connect_driver: "LXC" }), Result.NO);
});

test("never grants the blanket socket-level manage or monitor actions", () => {
  assert.equal(check(rules, "org.libvirt.unix.manage", {}), Result.NO);
  assert.equal(check(rules, "org.libvirt.unix.monitor", {}), Result.NO);
});

test("does not touch other users, even libvirt group members or a look-alike name", () => {
  for (const user of ["root", "alice", "bigfleet2", "Bigfleet", ""]) {
    assert.equal(check(rules, api("domain.start"), dom(OURS), user, ["libvirt", "bigfleet"]), "default", user);
    assert.equal(check(rules, "org.libvirt.unix.manage", {}, user), "default", user);
  }
});

test("leaves non-libvirt actions alone for the provider account", () => {
  assert.equal(check(rules, "org.freedesktop.login1.reboot", {}), "default");
  assert.equal(check(rules, "org.freedesktop.systemd1.manage-units", {}), "default");
});

const ACTIONS_FILE = path.join(__dirname, "libvirt-9.0-api-actions.txt");
const libvirtActions = fs
  .readFileSync(ACTIONS_FILE, "utf8")
  .split("\n")
  .map((l) => l.trim())
  .filter((l) => l && !l.startsWith("#"));

// The actions the rule may grant; anything else must be NO.
const GRANTED = new Set([
  "connect.getattr", "connect.read", "connect.search-domains",
  "domain.getattr", "domain.read", "domain.write", "domain.save",
  "domain.start", "domain.stop", "domain.delete", "domain.migrate", "domain.read-secure",
  "storage-pool.getattr", "storage-pool.read",
  "storage-vol.getattr", "storage-vol.read", "storage-vol.create",
  "storage-vol.data-write", "storage-vol.delete",
  "network.getattr", "network.read",
  "network-port.getattr", "network-port.read", "network-port.create", "network-port.delete",
].map(api));

test("every action the rule names exists in libvirt's API action list", () => {
  // A typo in the rule would be a silent deny; an unknown id in GRANTED a
  // test that proves nothing.
  assert.ok(libvirtActions.length > 100, "action list loaded");
  const known = new Set(libvirtActions);
  const src = fs.readFileSync(RULE_FILE, "utf8");
  const named = [...src.matchAll(/"(org\.libvirt\.api\.[a-z-]+\.[a-z-]+)"\s*:/g)].map((m) => m[1]);
  assert.deepEqual(new Set(named), GRANTED, "the rule grants exactly the reviewed list");
  for (const id of named) {
    assert.ok(known.has(id), id + " is not a libvirt 9.0 API action");
  }
  assert.ok(!src.includes('"org.libvirt.unix.manage":'), "manage must never be in the allow list");
});

test("every other libvirt API action is denied, even on the provider's own objects", () => {
  // Details that would satisfy any object check: our domain, volume, pool
  // and network names together.
  const ours = {
    connect_driver: "QEMU",
    domain_name: OURS,
    pool_name: "default",
    vol_name: OURS + ".qcow2",
    network_name: "default",
    interface_name: OURS,
    node_device_name: OURS,
    nwfilter_name: OURS,
    secret_usage_volume: OURS,
  };
  let denied = 0;
  for (const id of libvirtActions) {
    if (GRANTED.has(id)) {
      continue;
    }
    assert.equal(check(rules, id, ours), Result.NO, id);
    denied++;
  }
  assert.equal(denied, libvirtActions.length - GRANTED.size, "every action not granted was checked");
  assert.ok(denied > 75, "checked " + denied + " actions");
});
