export * from "./host-service.js";
export { Admission, defaultCapacity, type Capacity, type Shape } from "./admission.js";
