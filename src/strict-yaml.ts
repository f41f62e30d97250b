/**
 * YAML for configuration files, strictly: what the yaml library would only warn
 * about (an unresolved tag, an unknown directive) is an error here too, so a
 * configuration never means less than it says — and nothing is printed behind
 * the operator's back.
 */
import { parseDocument } from 'yaml';

/** Parses `text`; throws an Error naming the first problem (error or warning). */
export function parseStrictYaml(text: string): unknown {
  const doc = parseDocument(text, { prettyErrors: true, logLevel: 'silent' });
  const problem = doc.errors[0] ?? doc.warnings[0];
  if (problem) throw new Error(problem.message);
  return doc.toJS();
}
