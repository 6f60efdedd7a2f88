export { startExtractionService, DEFAULT_TIMING, type ExtractionOptions, type ExtractionTiming } from "./service.js";
export { Extractor, ExtractorDied, DEFAULT_EXTRACTION_LIMITS, type ExtractionLimits } from "./extractor.js";
export { ExtractionWorker, type Extract } from "./worker.js";
