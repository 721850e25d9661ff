import { report } from "@acme/report";
import { repeat } from "@acme/strings";

export function main(): string {
  return [repeat("=", 12), ...report({ build: [2, 4], test: [1] })].join("\n");
}
