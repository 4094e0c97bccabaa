// Vite's `?query` imports load a second instance of a module (used to test two copies of the package).
declare module '*?copy=2';
