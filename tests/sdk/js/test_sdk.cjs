// Mem0's official npm SDK (mem0ai, pinned in package-lock.json), unchanged, against this server:
// every call the SDK has, with real API keys, checking what comes back. Run by
// scripts/clients.sh (which sets MEM0_TEST_URL, MEM0_TEST_ADMIN_KEY and NODE_PATH).
"use strict";

const assert = require("node:assert/strict");
const crypto = require("node:crypto");
const { MemoryClient } = require("mem0ai");

const URL = process.env.MEM0_TEST_URL;
const ADMIN_KEY = process.env.MEM0_TEST_ADMIN_KEY;
const RUN = crypto.randomBytes(4).toString("hex");
// Real assistant replies are long: 500 to 3,000 characters.
const LONG_REPLY = Array(10)
  .fill(
    "Your order ships from the Porto warehouse on Tuesday; the courier needs a signature, so " +
      "pick a day when someone is home, or choose a locker at checkout next time.",
  )
  .join(" ");

async function createKey(body) {
  const response = await fetch(`${URL}/api-keys`, {
    method: "POST",
    headers: { "x-api-key": ADMIN_KEY, "content-type": "application/json" },
    body: JSON.stringify(body),
  });
  assert.equal(response.status, 201, await response.clone().text());
  return (await response.json()).key;
}

async function expectError(call, errorCode, text) {
  try {
    await call();
  } catch (error) {
    assert.equal(error.errorCode, errorCode, `${error.errorCode}: ${error.message}`);
    if (text) assert.ok(error.message.includes(text), error.message);
    return error;
  }
  assert.fail(`expected ${errorCode}`);
}

async function client(apiKey) {
  const memory = new MemoryClient({ apiKey, host: URL });
  await memory.initialized;
  return memory;
}

const tests = {
  async pingGivesTheTenant() {
    const memory = await client(ADMIN_KEY);
    assert.equal(memory.organizationId, "default");
    assert.equal(memory.projectId, "default");
    await expectError(() => new MemoryClient({ apiKey: "m0sk_wrong", host: URL }).ping(), "HTTP_401");
  },

  async memoriesRoundTrip() {
    const memory = await client(ADMIN_KEY);
    const erin = `erin-${RUN}`;
    const added = await memory.add([{ role: "user", content: "I am vegetarian and I love pizza" }], {
      user_id: erin,
    });
    assert.equal(added.status, "SUCCEEDED");
    assert.deepEqual(added.results.map((item) => item.memory).sort(), ["User is vegetarian", "User loves pizza"]);
    const verbatim = await memory.add(
      [
        { role: "user", content: "Where is my parcel?" },
        { role: "assistant", content: LONG_REPLY },
      ],
      { user_id: erin, infer: false, metadata: { topic: "orders" } },
    );
    assert.deepEqual(
      verbatim.results.map((item) => item.memory),
      ["Where is my parcel?", LONG_REPLY],
    );

    const found = await memory.search("What does the user eat?", { filters: { user_id: erin }, topK: 2 });
    assert.ok(found.results.length >= 1 && found.results.length <= 2, JSON.stringify(found));
    assert.ok(["User is vegetarian", "User loves pizza"].includes(found.results[0].memory), JSON.stringify(found));
    assert.ok(found.results.every((item) => item.score >= 0 && item.score <= 1));
    const orders = await memory.search("parcel courier", {
      filters: { AND: [{ userId: erin }, { metadata: { topic: "orders" } }] },
    });
    assert.ok(orders.results.length >= 1, JSON.stringify(orders));
    assert.ok(orders.results.every((item) => item.metadata.topic === "orders"), JSON.stringify(orders));

    const all = await memory.getAll({ filters: { user_id: erin } });
    assert.equal(all.count, 4);
    assert.equal(all.results.length, 4);
    const page = await memory.getAll({ filters: { user_id: erin }, page: 2, pageSize: 3 });
    assert.equal(page.count, 4);
    assert.equal(page.results.length, 1);
    assert.equal(page.results[0].id, all.results[3].id);
    assert.equal(page.next, null);

    const parcel = all.results.find((item) => item.memory === "Where is my parcel?");
    const one = await memory.get(parcel.id);
    assert.equal(one.memory, "Where is my parcel?");
    assert.equal(one.userId, erin, "responses reach the caller in camelCase");
    const updated = await memory.update(parcel.id, { text: "Where is my parcel? It is late." });
    assert.equal(updated.memory, "Where is my parcel? It is late.");
    const history = await memory.history(parcel.id);
    assert.deepEqual(
      history.map((entry) => entry.event),
      ["ADD", "UPDATE"],
    );
    assert.equal(history[1].oldMemory, "Where is my parcel?");

    const users = await memory.users();
    const mine = users.results.find((entity) => entity.name === erin);
    assert.equal(mine.type, "user");
    assert.equal(mine.totalMemories, 4);

    assert.deepEqual(await memory.delete(parcel.id), { message: "Memory deleted successfully!" });
    await expectError(() => memory.get(parcel.id), "HTTP_404");
    const removed = await memory.deleteAll({ user_id: erin });
    assert.equal(removed.deleted, 3);
    assert.equal((await memory.getAll({ filters: { user_id: erin } })).count, 0);
  },

  async boundKeysStayInTheirScope() {
    const admin = await client(ADMIN_KEY);
    const frank = `frank-${RUN}`;
    const gina = `gina-${RUN}`;
    await admin.add("Gina's secret", { user_id: gina, infer: false });
    const memory = await client(await createKey({ label: "frank", role: "write", user_ids: [frank] }));
    const mine = await memory.add("I love pizza", { user_id: frank });
    assert.deepEqual(
      mine.results.map((item) => item.memory),
      ["User loves pizza"],
    );
    await expectError(() => memory.search("secret", { filters: { user_id: gina } }), "HTTP_403");
    await expectError(() => memory.getAll({ filters: { user_id: gina } }), "HTTP_403");
    await expectError(() => memory.add("hi", { user_id: gina, infer: false }), "HTTP_403");
    await admin.deleteUsers({ userId: frank });
    await admin.deleteUsers({ userId: gina });
    assert.equal((await admin.getAll({ filters: { user_id: gina } })).count, 0);
  },

  async unsupportedCallsSaySo() {
    const memory = await client(ADMIN_KEY);
    const id = crypto.randomUUID();
    for (const [call, feature] of [
      [() => memory.batchUpdate([{ memoryId: id, text: "x" }]), "batch"],
      [() => memory.batchDelete([id]), "batch"],
      [() => memory.createMemoryExport({ schema: {}, filters: { user_id: "a" } }), "export"],
      [() => memory.getWebhooks({ projectId: "default" }), "webhooks"],
      [() => memory.getProject({ fields: [] }), "projects"],
      [() => memory.add("x", { user_id: "a", app_id: "shop" }), "app_id"],
    ]) {
      const error = await expectError(call, "HTTP_501", "not supported by this server");
      assert.ok(error.message.includes(feature), error.message);
    }
  },
};

(async () => {
  let failed = 0;
  for (const [name, test] of Object.entries(tests)) {
    try {
      await test();
      console.log(`ok      ${name}`);
    } catch (error) {
      failed += 1;
      console.log(`FAILED  ${name}`);
      console.log(error);
    }
  }
  console.log(`npm sdk: ${Object.keys(tests).length - failed} passed, ${failed} failed`);
  process.exit(failed ? 1 : 0);
})();
