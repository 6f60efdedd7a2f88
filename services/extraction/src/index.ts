export { startExtractionService } from "./service.js";
export { Extractor, ExtractorDied, DEFAULT_EXTRACTION_LIMITS, type ExtractionLimits } from "./extractor.js";
export { ExtractionWorker, type Extract } from "./worker.js";
