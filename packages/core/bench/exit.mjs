// Open-handle check: 10,000 contexts with a one-hour deadline whose signals were read (so each has a timer),
// none of them ended. The process must still exit at once: every timer the core arms is unref'd.
import { currentSignal, runWithDeadline } from '../dist/index.js';

for (let i = 0; i < 10_000; i++) {
  runWithDeadline(3_600_000, () => {
    currentSignal();
    return new Promise(() => {}); // never settles: the context never ends
  });
}
console.log('armed 10000 one-hour deadlines');
