// Validate Prometheus Operator objects (a JSON array on stdin) with the models' schema validators
// (generated from the Operator's CRDs). Prints one JSON line per object: {kind, name, errors}.
// Types, enums and required fields are checked; unknown fields are not (the CRD schemas allow
// them and the API server prunes them), so tests/k8s also compares the rendered fields with
// the ones the chart is meant to set.
import { readFileSync } from "node:fs";
import { PodMonitor } from "@kubernetes-models/prometheus-operator/monitoring.coreos.com/v1/PodMonitor";
import { Probe } from "@kubernetes-models/prometheus-operator/monitoring.coreos.com/v1/Probe";
import { PrometheusRule } from "@kubernetes-models/prometheus-operator/monitoring.coreos.com/v1/PrometheusRule";
import { ServiceMonitor } from "@kubernetes-models/prometheus-operator/monitoring.coreos.com/v1/ServiceMonitor";

const models = { PodMonitor, Probe, PrometheusRule, ServiceMonitor };
const objects = JSON.parse(readFileSync(0, "utf8"));
for (const obj of objects) {
  const Model = models[obj.kind];
  const result = { kind: obj.kind, name: obj.metadata?.name, errors: [] };
  if (!Model || obj.apiVersion !== "monitoring.coreos.com/v1") {
    result.errors.push(`not a known Operator kind: ${obj.apiVersion} ${obj.kind}`);
  } else {
    try {
      new Model(obj).validate();
    } catch (e) {
      result.errors.push(String(e.message ?? e));
    }
  }
  console.log(JSON.stringify(result));
}
