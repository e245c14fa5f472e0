// Runs each Chrome JSON trace through the DevTools trace engine (see check-devtools.sh, which
// installs it and calls this): node check-devtools.mjs ENGINE_MODULE VERSION TRACE.json...
// Prints one line per trace it loaded; exits 1 at the first it could not, with the error.
import fs from 'node:fs';
import {pathToFileURL} from 'node:url';

const [enginePath, version, ...files] = process.argv.slice(2);
const {analyzeEvents} = await import(pathToFileURL(enginePath).href);

for (const file of files) {
  let events;
  try {
    const json = JSON.parse(fs.readFileSync(file, 'utf8'));
    events = json.traceEvents ?? json;
  } catch (e) {
    console.error(`${file}: not Chrome trace JSON: ${e.message}`);
    process.exit(1);
  }
  let data;
  try {
    const {parsedTrace} = await analyzeEvents(events);
    data = parsedTrace.data;
  } catch (e) {
    console.error(`${file}: the DevTools trace engine ${version} failed: ${e.stack ?? e}`);
    process.exit(1);
  }
  const nameless = events.filter(e => typeof e.name !== 'string' || typeof e.cat !== 'string');
  if (nameless.length > 0) {
    console.error(`${file}: ${nameless.length} events without a string name and cat, the first: ` +
        JSON.stringify(nameless[0]));
    process.exit(1);
  }
  // The engine's bounds must lie within the events' own time span (µs).
  const timed = events.filter(e => e.ph !== 'M' && typeof e.ts === 'number');
  const first = Math.min(...timed.map(e => e.ts));
  const last = Math.max(...timed.map(e => e.ts + (e.dur ?? 0)));
  const bounds = data.Meta.traceBounds;
  if (timed.length > 0 && (bounds.min < first || bounds.max > last)) {
    console.error(`${file}: the engine's bounds ${bounds.min}..${bounds.max} µs lie outside ` +
        `the events' ${first}..${last} µs`);
    process.exit(1);
  }
  const processes = data.Meta.threadsInProcess.size;
  console.log(`${file}: loaded by the DevTools trace engine ${version}: ${events.length} ` +
      `events, ${processes} processes, bounds ${bounds.min}..${bounds.max} µs`);
}
