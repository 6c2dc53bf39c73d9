// Validates every ScaledObject in the YAML files given against KEDA's API
// schema (@kubernetes-models/keda, generated from KEDA's Go API types), and
// checks that each nats-jetstream trigger carries the metadata KEDA's
// scaler reads. Exits 1 on the first problem, naming the file.
import { readFileSync } from "node:fs";
import { parseAllDocuments } from "yaml";
import { ScaledObject } from "@kubernetes-models/keda/keda.sh/v1alpha1/ScaledObject";

const REQUIRED = ["natsServerMonitoringEndpoint", "stream", "consumer", "lagThreshold"];
let checked = 0;
for (const file of process.argv.slice(2)) {
  for (const doc of parseAllDocuments(readFileSync(file, "utf8"))) {
    const value = doc.toJS();
    if (!value || value.kind !== "ScaledObject") continue;
    const fail = (why) => { console.error(`${file}: ScaledObject ${value.metadata?.name}: ${why}`); process.exit(1); };
    try { new ScaledObject(value).validate(); } catch (err) { fail(err.message); }
    for (const trigger of value.spec.triggers) {
      if (trigger.type !== "nats-jetstream") continue;
      const meta = trigger.metadata ?? {};
      for (const key of REQUIRED) if (!(key in meta)) fail(`trigger lacks ${key}`);
      if (!meta.account && !meta.accountID) fail("trigger names neither account nor accountID");
      if (!/^[0-9]+$/.test(meta.lagThreshold)) fail(`lagThreshold ${meta.lagThreshold} is not a whole number`);
    }
    checked += 1;
  }
}
if (checked === 0) { console.error("no ScaledObject found"); process.exit(1); }
console.log(`${checked} ScaledObject(s) valid`);
