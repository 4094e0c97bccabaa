// express 4, installed under an alias to test both majors; its API is the part of express 5's types we use.
declare module 'express4' {
  import express from 'express';
  export default express;
}
